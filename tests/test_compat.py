"""The private torch APIs ddplab relies on (compat.PRIVATE_APIS) exist in the installed torch: a release that drops
one fails here, by name, before a user meets it deep in a run."""

import pytest

from ddplab import compat


@pytest.mark.parametrize("api", compat.PRIVATE_APIS, ids=lambda api: api.path)
def test_each_private_api_resolves_in_this_torch(api):
    assert compat.resolve(api) is not None


def test_a_missing_one_is_named():
    with pytest.raises(AttributeError, match="no_such_thing"):
        compat.resolve(compat.PrivateApi("torch.distributed:no_such_thing", "-", "-", "-"))
