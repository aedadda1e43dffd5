"""``subgpu_jax.model.checks.flag``: booleans only, no coercion (``bool("false")`` is True), the
one-line message naming the field; the evaluator's three flags use it."""

from __future__ import annotations

import numpy as np
import pytest

from subgpu_jax.model.checks import flag


@pytest.mark.parametrize("v", [True, False, np.True_, np.False_])
def test_flag_takes_booleans(v):
    got = flag(v, "x")
    assert type(got) is bool and got == bool(v)
    assert flag(v, "x", allow_none=True) == bool(v)


def test_flag_none_only_when_allowed():
    assert flag(None, "x", allow_none=True) is None
    with pytest.raises(ValueError, match=r"^x must be True or False, got None$"):
        flag(None, "x")


@pytest.mark.parametrize("bad", ["false", "True", 0, 1, 1.0, [], "", np.int64(1)], ids=repr)
def test_flag_refuses_everything_else(bad):
    with pytest.raises(ValueError, match=r"^pad_small must be True, False or None, got "):
        flag(bad, "pad_small", allow_none=True)
    with pytest.raises(ValueError, match=r"^inline_tables must be True or False, got "):
        flag(bad, "inline_tables")
