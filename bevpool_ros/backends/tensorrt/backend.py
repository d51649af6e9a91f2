class TensorRTBackend: pass  # placeholder while building
