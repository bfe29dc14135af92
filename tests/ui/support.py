"""Helpers of the dashboard's browser tests: waits with deadlines (Selenium's
WebDriverWait), clicking (and accepting the confirmations of) buttons, typing, signing in,
marking a document to prove that a region changed without a page load, and the console."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The session cookie of the dashboard (see the dashboard's contract).
COOKIE = "quartzlite_ui"
#: Seconds a browser wait gives the page (htmx regions refresh every 2 s; the node
#: reacts within its FAST poll interval).
WAIT_S = 20.0


@dataclass
class UiServer:
    """One ``quartzlite serve`` process with its log in a file."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    admin_secret: str
    viewer_secret: str
    url: str = ""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None


class Console:
    """The browser's console messages, read (and so drained) from chromedriver as we go."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.entries: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        self.entries.extend(self.driver.get_log("browser"))
        return self.entries

    def csp_violations(self) -> list[str]:
        return [e["message"] for e in self.read()
                if "Refused to" in e["message"] or "Content Security Policy" in e["message"]]


def assert_no_csp_violations(browser: Any) -> None:
    violations = browser.console.csp_violations()
    assert not violations, "the page broke its Content-Security-Policy:\n" + "\n".join(violations)


# ---- helpers -----------------------------------------------------------------------------


def wait(browser: Any, condition: Callable[[Any], Any], message: str,
         timeout: float = WAIT_S) -> Any:
    """WebDriverWait for ``condition`` (elements that htmx replaced meanwhile are looked
    up again on the next poll)."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        browser, timeout, poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    ).until(condition, message=f"waited {timeout}s for {message}")


def find(browser: Any, css: str, timeout: float = WAIT_S) -> Any:
    """The element ``css`` once it is displayed."""
    from selenium.webdriver.common.by import By

    def shown(driver: Any) -> Any:
        element = driver.find_element(By.CSS_SELECTOR, css)
        return element if element.is_displayed() else False

    return wait(browser, shown, f"{css} on {browser.current_url}", timeout)


def present(browser: Any, css: str) -> bool:
    from selenium.webdriver.common.by import By

    return bool(browser.find_elements(By.CSS_SELECTOR, css))


def wait_for_url(browser: Any, pattern: str, timeout: float = WAIT_S) -> str:
    """The browser's URL once the regex ``pattern`` matches its path and query, or its
    path alone (a redirect may add a query such as ``?done=paused``)."""
    def matches(driver: Any) -> str | bool:
        url: str = driver.current_url
        target = re.sub(r"^https?://[^/]+", "", url)
        path = target.split("?", 1)[0]
        return url if re.fullmatch(pattern, target) or re.fullmatch(pattern, path) else False

    return str(wait(browser, matches, f"a URL matching {pattern}", timeout))


def click(browser: Any, css: str, timeout: float = WAIT_S) -> None:
    """Click ``css``; when it (or its form) asks for confirmation, accept it."""
    from selenium.webdriver.support import expected_conditions as ec

    element = find(browser, css, timeout)
    confirm = browser.execute_script(
        "var el = arguments[0]; return el.getAttribute('data-confirm') ||"
        " (el.form && el.form.getAttribute('data-confirm')) || null;", element)
    element.click()
    if confirm:
        wait(browser, ec.alert_is_present(), f"the confirmation of {css}").accept()


def type_into(browser: Any, css: str, text: str) -> None:
    """Replace the value of the input ``css`` by typing (so its key and input events fire)."""
    from selenium.webdriver.common.keys import Keys

    element = find(browser, css)
    element.send_keys(Keys.CONTROL, "a")
    element.send_keys(Keys.DELETE)
    if text:
        element.send_keys(text)


def assert_html(browser: Any) -> None:
    """The page was served as HTML (else the browser shows its source, not a page)."""
    content_type = browser.execute_script("return document.contentType;")
    assert content_type == "text/html", (
        f"{browser.current_url} is served as {content_type}, not text/html: the browser "
        "shows its source instead of the page"
    )


def sign_in(browser: Any, base_url: str, secret: str) -> None:
    """Sign in through the login form and wait until the browser left it."""
    browser.get(f"{base_url}/ui/login")
    assert_html(browser)
    type_into(browser, "#login-form #token", secret)
    click(browser, "#sign-in")
    wait_for_url(browser, r"/ui/(?!login)[^?]*(\?.*)?")
    find(browser, "#nav")


def mark_document(browser: Any) -> None:
    """Mark the current document: ``document_is_marked`` is False after a page load."""
    browser.execute_script("window.__marker = 1;")


def document_is_marked(browser: Any) -> bool:
    return browser.execute_script("return window.__marker === 1;") is True


def session_cookie(browser: Any) -> str:
    cookie = browser.get_cookie(COOKIE)
    assert cookie is not None, f"no {COOKIE} cookie: {browser.get_cookies()}"
    return str(cookie["value"])
