"""Alembic environment of quartzlite; shipped in the wheel as quartzlite._migrations."""
