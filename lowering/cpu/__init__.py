"""The CPU executors and the op formulas they run: the spec of every emitter."""
