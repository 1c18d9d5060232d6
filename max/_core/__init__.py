"""Native extension modules of the ``max`` package (``max._core.driver``)."""

# The distribution's version (pyproject.toml reads it from here);
# max.driver.__version__ re-exports it, as MAX's does.
__version__ = "0.1.0"
