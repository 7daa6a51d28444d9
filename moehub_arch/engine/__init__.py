"""The compiled simulation engine: event queue, clock conversions, state layout and run loop."""
