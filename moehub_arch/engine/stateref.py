"""State handed to compiled code as one pointer (the Numba type ``StateRef``).

Python keeps the State namedtuple (composition.State: ~80 arrays). Numba passes a tuple argument
by value, flattened: every array becomes its seven-plus machine arguments (meminfo, parent, size,
item size, data, shape, strides), about 665 scalars at every call between compiled functions. Each
of the ~240 compiled functions then spends LLVM time on those arguments (prologue, spills, the
call sites that forward them) and every call copies them; a cold compile cost ~455 CPU seconds.

``state_ref(st)`` packs the namedtuple's array descriptors (Numba's own array structs, the same
bytes the flattened arguments held) once into a small buffer and returns a ``StateRef`` holding
its address: compiled code receives one pointer, and ``st.field`` loads the field's descriptor
from the buffer. The descriptors never change while compiled code runs (no compiled function
assigns a State field; Python replaces arrays, e.g. the grown event queue, only between calls and
packs again), so the loads are marked invariant and LLVM hoists and merges them freely.

Memory: the arrays stay owned by numpy. Compiled code runs without Numba's reference-counting
runtime (engine/jit.py), so the descriptors carry no meminfo; the StateRef keeps the namedtuple
(and hence every array) and the buffer alive while compiled code uses them.

Under NUMBA_DISABLE_JIT (the pure-Python engine) ``state_ref`` returns the namedtuple itself:
both engines read the same fields by the same names.
"""
import hashlib
import os

import numpy as np
from llvmlite import ir
from numba import njit, typeof
from numba.core import cgutils, types
from numba.core.datamodel import models
from numba.core.extending import (NativeValue, infer_getattr, intrinsic, lower_getattr_generic,
                                  register_model, typeof_impl, unbox)
from numba.core.typing.templates import AttributeTemplate


class StateRefType(types.Type):
    """A pointer to the packed array descriptors of one State layout (field names and types)."""

    def __init__(self, fields):
        self.fields = tuple(fields)                  # ((name, numba type), ...)
        self.index = {n: i for i, (n, _) in enumerate(self.fields)}
        self.field_dict = dict(self.fields)
        # the name goes into every compiled function's mangled symbol: a digest, not ~80 types
        digest = hashlib.sha1(str(self.fields).encode()).hexdigest()[:12]
        super().__init__(name=f"StateRef[{len(self.fields)} fields, {digest}]")

    @property
    def key(self):
        return self.fields


@register_model(StateRefType)
class _StateRefModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        members = [dmm.lookup(t).get_data_type() for _, t in fe_type.fields]
        super().__init__(dmm, fe_type, ir.LiteralStructType(members).as_pointer())


@infer_getattr
class _StateRefAttribute(AttributeTemplate):
    key = StateRefType

    def generic_resolve(self, typ, attr):
        return typ.field_dict.get(attr)


@lower_getattr_generic(StateRefType)
def _state_ref_getattr(context, builder, typ, val, attr):
    ptr = cgutils.gep_inbounds(builder, val, 0, typ.index[attr])
    data = builder.load(ptr)
    # invariant while compiled code runs (module docstring): loads may be hoisted past stores
    data.set_metadata("invariant.load", builder.module.add_metadata([]))
    return context.data_model_manager[typ.field_dict[attr]].from_data(builder, data)


class StateRef:
    """A packed State (see the module docstring); only ``state_ref`` makes one."""
    __slots__ = ("state", "buffer", "address", "numba_type")

    def __init__(self, state, buffer, numba_type):
        self.state = state
        self.buffer = buffer
        self.address = buffer.ctypes.data
        self.numba_type = numba_type

    def __getattr__(self, name):   # Python code handed a StateRef reads the State's arrays
        return getattr(self.state, name)


@typeof_impl.register(StateRef)
def _typeof_state_ref(val, c):
    return val.numba_type


@unbox(StateRefType)
def _unbox_state_ref(typ, obj, c):
    address = c.pyapi.object_getattr_string(obj, "address")
    ptr = c.pyapi.long_as_voidptr(address)
    c.pyapi.decref(address)
    return NativeValue(c.builder.bitcast(ptr, c.context.get_value_type(typ)))


@intrinsic
def _store_descriptors(typingctx, address, state):
    """Write the array descriptors of the State tuple `state` to the buffer at `address`."""
    ref_type = StateRefType(zip(state.fields, tuple(state)))

    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(args[0], context.get_value_type(ref_type))
        for i, t in enumerate(tuple(state)):
            value = builder.extract_value(args[1], i)
            data = context.data_model_manager[t].as_data(builder, value)
            builder.store(data, cgutils.gep_inbounds(builder, ptr, 0, i))
        return context.get_dummy_value()
    return types.void(address, state), codegen


# one small compiled function per State layout; without the reference-counting runtime, like the
# engine, so the descriptors it writes hold no meminfo (numpy owns the arrays)
def _pack_descriptors(address, state):
    _store_descriptors(address, state)


_pack = njit(cache=True, _nrt=False)(_pack_descriptors)


# Any other namedtuple (a test's, a user's) is packed by an uncached copy: Numba's cache index
# pickles every cached version's argument types, and one naming a class another process cannot
# import (a test module's namedtuple) makes the whole index unreadable there - every later run
# would fail to load `_pack`.
_pack_uncached = njit(cache=False, _nrt=False)(_pack_descriptors)
_ENGINE_STATE_MODULE = "moehub_arch.composition"


_LAYOUTS = {}   # State tuple type -> (StateRefType, buffer bytes)


def jit_disabled():
    return os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")


def _layout(st):
    tuple_type = typeof(st)
    layout = _LAYOUTS.get(tuple_type)
    if layout is None:
        from numba.core.registry import cpu_target
        ref_type = StateRefType(zip(st._fields, tuple(tuple_type)))
        context = cpu_target.target_context
        size = context.get_abi_sizeof(context.get_value_type(ref_type).pointee)
        layout = _LAYOUTS[tuple_type] = (ref_type, size)
    return layout


def state_ref_type(st):
    """The Numba type of `state_ref(st)`, without packing (nothing is compiled)."""
    return _layout(st)[0]


def state_ref(st):
    """What compiled engine functions take as their State argument: a StateRef packing `st`
    (the pure-Python engine: `st` itself). Pack again after replacing any array of `st`."""
    if jit_disabled():
        return st
    ref_type, size = _layout(st)
    buffer = np.zeros(size, np.uint8)
    pack = _pack if type(st).__module__ == _ENGINE_STATE_MODULE else _pack_uncached
    pack(buffer.ctypes.data, st)
    return StateRef(st, buffer, ref_type)
