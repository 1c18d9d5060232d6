"""max: a reimplementation of Modular MAX's ``max.driver`` stream/event API."""
