"""Native extension modules of the ``max`` package (``max._core.driver``)."""
