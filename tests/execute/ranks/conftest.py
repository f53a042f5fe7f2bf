import pytest

from fsdp_verify.execute.ranks.judge import RealRanks


@pytest.fixture(scope="session")
def real():
    """One rank session for every test of a worker: a pool costs seconds a rank to start."""
    with RealRanks(backend="gloo", seed=0, deadline=20) as session:
        yield session
