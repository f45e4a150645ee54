"""RMSNorm, in float32 whatever the activation dtype."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model.layers.linear import float_matmuls, logical_param

Array = jax.Array


class RMSNorm(nn.Module):
    size: int
    eps: float
    axis_name: str
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = logical_param(self, "scale", (self.size,), (self.axis_name,), self.dtype, nn.initializers.ones)
        x32 = x.astype(jnp.float32)
        # The sum of squares as a matmul with ones: on a CPU float_matmuls adds a row's terms in one
        # order whatever the number of rows, where XLA's own reduction does not (576 inputs: one
        # order up to 4 rows, another from 8), and a seeded request must not depend on its batch.
        squares = float_matmuls(x32 * x32, [jnp.ones((self.size, 1), jnp.float32)])[0]
        normed = x32 * jax.lax.rsqrt(squares / self.size + self.eps)
        return scale * normed.astype(self.dtype)
