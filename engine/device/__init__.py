"""The device side: the runner seam and its JAX runner, the compiled steps, device sampling, KV pool
sizing, compile watching, and the process group's mirrored runner."""
