"""CuTe DSL device code: shared TMA helpers (`tma`) and one module per kernel family."""
