"""Host-side numerics: the 8-bit float formats (:mod:`.formats`) and the references kernels are
tested against (:mod:`.reference`, on numpy and ml_dtypes)."""
