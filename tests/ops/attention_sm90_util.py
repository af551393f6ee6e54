"""Helpers of the Hopper prefill's tests (test_attention_sm90*.py): the module kcompiler.ops.attention
and an autouse fixture that gives each test an empty plan cache."""
from __future__ import annotations

import importlib

import pytest

#: The module kcompiler.ops.attention (the package's attribute of that name is the function).
ops_attention = importlib.import_module("kcompiler.ops.attention")


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    """Each test starts with no prepared Hopper-path call (ops.attention's PLANS): one made on the
    emulated module must not serve another test's call."""
    from collections import OrderedDict
    monkeypatch.setattr(ops_attention, "PLANS", OrderedDict())
