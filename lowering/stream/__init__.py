"""The streamed-kernel path (online softmax, streamed sums): plan, sm_80 emitter."""
