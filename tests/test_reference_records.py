"""The pure-Python engine's record arrays (engine/state.py record_view: ReferenceRecords) hold
the same memory and values as numpy's recarray and read and write them the same way; the
compiled engine keeps the recarray. (Every *_engines_agree test runs a whole config on them.)"""
import pickle

import numpy as np
import pytest

from moehub_arch.engine import state

DTYPE = np.dtype([("pc", np.int64), ("ready", np.int64), ("launch", np.int64)])


@pytest.fixture
def reference_engine(monkeypatch):
    monkeypatch.setattr(state, "_jit_disabled", lambda: True)


def test_the_compiled_engine_keeps_numpys_recarray():
    rec = state.record_view(np.zeros(3, DTYPE))
    assert type(rec) is np.recarray and type(rec[0]) is np.record


def test_reference_records_read_and_write_the_same_memory(reference_engine):
    raw = np.zeros(3, DTYPE)
    rec = state.record_view(raw)
    assert isinstance(rec, state.ReferenceRecords) and rec.dtype == DTYPE
    rec[1].pc = 7
    rec[2].ready = -3
    assert raw["pc"].tolist() == [0, 7, 0] and raw["ready"].tolist() == [0, 0, -3]
    # values are numpy's, as a recarray's element gives them
    assert type(rec[1].pc) is type(np.zeros(1, DTYPE).view(np.recarray)[0].pc) is np.int64
    # field arrays by attribute, slices keep the element type
    assert rec.pc.tolist() == [0, 7, 0] and type(rec.pc) is np.ndarray
    assert rec[1:3][0].pc == 7 and isinstance(rec[1:3], state.ReferenceRecords)
    # numpy's own record attributes still answer; a field that does not exist is an error
    assert rec[1].dtype == DTYPE
    with pytest.raises(AttributeError, match="no field 'pcx'"):
        rec[1].pcx = 1
    with pytest.raises(AttributeError):
        rec[1].pcx


def test_reference_records_pickle_and_view_again(reference_engine):
    rec = state.record_view(np.zeros(2, DTYPE))
    rec[0].launch = 5
    back = pickle.loads(pickle.dumps(rec))
    assert isinstance(back, state.ReferenceRecords) and back[0].launch == 5
    assert pickle.loads(pickle.dumps(rec.launch)).tolist() == [5, 0]
    # a view of a view: the same element type, not numpy's record
    again = state.record_view(rec)
    assert type(again[0]) is type(rec[0])
