"""The runtime checker the test suite runs the package under (pyproject's addopts): beartype
with the numeric tower, so an int passes where a float is annotated (PEP 484)."""

from beartype import BeartypeConf, beartype

checker = beartype(conf=BeartypeConf(is_pep484_tower=True))
