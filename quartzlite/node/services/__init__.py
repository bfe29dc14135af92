"""The node's threads, one module each (see :mod:`quartzlite.node.node`)."""

from quartzlite.node.services.compensator import Compensator
from quartzlite.node.services.expirer import Expirer
from quartzlite.node.services.firer import Firer
from quartzlite.node.services.heartbeat import Heartbeat
from quartzlite.node.services.janitor import Janitor
from quartzlite.node.services.killer import Killer
from quartzlite.node.services.output import LiveOutput
from quartzlite.node.services.results import Results
from quartzlite.node.services.scanner import Scanner
from quartzlite.node.services.spawner import Spawner
from quartzlite.node.services.starter import Starter
from quartzlite.node.services.watch import Watch
from quartzlite.node.services.watchdog import Watchdog

__all__ = ["Compensator", "Expirer", "Firer", "Heartbeat", "Janitor", "Killer", "LiveOutput",
           "Results", "Scanner", "Spawner", "Starter", "Watch", "Watchdog"]
