from . import typecheck  # noqa: F401  (pyproject: --jaxtyping-packages=...,tests.typecheck.checker)
