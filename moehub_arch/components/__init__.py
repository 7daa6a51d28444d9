"""Hardware blocks. Each module models one block: its state arrays live in ``engine.state`` and its
handlers are ``@njit`` functions called from the single run loop in ``dispatch.loop``."""
