# SPDX-License-Identifier: Apache-2.0
"""The DLPack and buffer-protocol edges of the mxkit module, on the host (issue 30's device crash
audit): capsules made here with ctypes straight from dlpack.h (legacy and 1.x versioned, so no
producer library's behaviour is assumed), consumed by mxkit; mxkit's capsules consumed here. Each
test checks what a consumer or producer must do: rename the capsule it takes, call the
producer's deleter exactly once and only after the last read, keep read-only flags, honour
byte_offset and strides, refuse what it cannot read (a newer major version, a corrupt tensor, a
big-endian or non-contiguous buffer) with an error instead of reading through it."""
import ctypes
import gc

import numpy as np
import pytest

import mxkit

_mx = mxkit._mxkit
RNG = np.random.default_rng(30)


# ---- dlpack.h, as ctypes structs -----------------------------------------------------------
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


LEGACY_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", LEGACY_DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", VERSIONED_DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

READ_ONLY, IS_COPIED = 1, 2
KDLCPU = 1
CODES = {"f": 2, "u": 1, "i": 0, "b": 6}  # kDLFloat, kDLUInt, kDLInt, kDLBool

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# Capsule names must outlive the capsules: module constants.
NAME_LEGACY, NAME_VERSIONED = b"dltensor", b"dltensor_versioned"
USED_LEGACY, USED_VERSIONED = b"used_dltensor", b"used_dltensor_versioned"


def capsule_name(c):
    return _api.PyCapsule_GetName(c)


class Producer:
    """Exports one NumPy array as a DLPack capsule built field by field here. It counts the
    deleter calls and keeps every capsule it handed out, so a test can check how mxkit consumed
    it. Options corrupt or change one field at a time."""

    def __init__(self, arr, *, versioned=True, major=1, flags=0, byte_offset=0, shape=None, strides="numpy",
                 ndim=None, lanes=1, bits=None, null_shape=False, legacy_signature=False):
        self.arr = arr
        self.versioned, self.major, self.flags = versioned, major, flags
        self.byte_offset, self.lanes, self.bits = byte_offset, lanes, bits
        self.shape = list(arr.shape) if shape is None else list(shape)
        if strides == "numpy":
            strides = [s // arr.itemsize for s in arr.strides]
        self.strides = strides
        self.ndim = len(self.shape) if ndim is None else ndim
        self.null_shape = null_shape
        self.deleted = 0
        self.capsules, self.max_versions = [], []
        self._keep = []
        if legacy_signature:  # a pre-1.0 producer: __dlpack__(stream=None) only
            self.__dlpack__ = lambda stream=None: self._export(None)

    def __dlpack_device__(self):
        return (KDLCPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self._export(max_version)

    def _deleter(self, _):
        self.deleted += 1

    def _export(self, max_version):
        self.max_versions.append(max_version)
        versioned = self.versioned and max_version is not None and max_version[0] >= 1
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * max(len(self.strides), 1))(*self.strides)
        if versioned:
            m = DLManagedTensorVersioned()
            m.version = DLPackVersion(self.major, 0)
            m.flags = self.flags
            m.deleter = VERSIONED_DELETER(self._deleter)
        else:
            m = DLManagedTensor()
            m.deleter = LEGACY_DELETER(self._deleter)
        t = m.dl_tensor
        t.data = self.arr.__array_interface__["data"][0] - self.byte_offset if self.byte_offset else self.arr.__array_interface__["data"][0]
        t.device = DLDevice(KDLCPU, 0)
        t.ndim = self.ndim
        t.dtype = DLDataType(CODES[self.arr.dtype.kind], self.bits or 8 * self.arr.itemsize, self.lanes)
        t.shape = None if self.null_shape else shape
        t.strides = strides
        t.byte_offset = self.byte_offset
        self._keep += [m, shape, strides, m.deleter]
        c = _api.PyCapsule_New(ctypes.addressof(m), NAME_VERSIONED if versioned else NAME_LEGACY, None)
        self.capsules.append(c)
        return c


def consume(capsule):
    """Takes a capsule as a consumer does: renames it, copies the data out, calls the deleter.
    Returns (bytes, shape, strides, flags or None for a legacy capsule)."""
    name = capsule_name(capsule)
    assert name in (NAME_LEGACY, NAME_VERSIONED), name
    p = _api.PyCapsule_GetPointer(capsule, name)
    assert _api.PyCapsule_SetName(capsule, USED_VERSIONED if name == NAME_VERSIONED else USED_LEGACY) == 0
    m = (DLManagedTensorVersioned if name == NAME_VERSIONED else DLManagedTensor).from_address(p)
    t = m.dl_tensor
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = [t.strides[i] for i in range(t.ndim)] if t.strides else None
    nbytes = int(np.prod(shape)) * t.dtype.bits // 8
    data = ctypes.string_at(t.data + t.byte_offset, nbytes) if nbytes else b""
    flags = m.flags if name == NAME_VERSIONED else None
    pointer = t.data  # read before the deleter frees the struct t lives in
    m.deleter(ctypes.pointer(m))
    return data, shape, strides, flags, pointer


def matrix(rows, cols):
    return RNG.standard_normal((rows, cols)).astype(np.float32)


# ---- consuming capsules ----------------------------------------------------------------------
@pytest.mark.parametrize("versioned", [True, False])
def test_capsules_are_read_in_place_renamed_and_released_once(versioned):
    x = matrix(32, 64)
    p = Producer(x, versioned=versioned)
    t = _mx.import_tensor(p)
    assert p.max_versions == [(1, 0)]  # a DLPack 1.x consumer asks for a versioned capsule
    assert capsule_name(p.capsules[0]) == (USED_VERSIONED if versioned else USED_LEGACY)
    assert t.data_ptr == x.__array_interface__["data"][0] and t.shape == (32, 64) and t.dtype == "float32"
    assert p.deleted == 0  # alive while mxkit holds it
    np.testing.assert_array_equal(np.asarray(t), x)
    del t
    gc.collect()
    assert p.deleted == 1
    codes, scales = mxkit.quantize(Producer(x, versioned=versioned), "mxfp8_e4m3")
    want = mxkit.quantize(x, "mxfp8_e4m3")
    np.testing.assert_array_equal(codes, want.codes)
    np.testing.assert_array_equal(scales, want.scales)


def test_a_producer_without_max_version_gets_a_second_plain_call():
    x = matrix(32, 32)
    p = Producer(x, legacy_signature=True)
    t = _mx.import_tensor(p)
    assert p.max_versions == [None] and capsule_name(p.capsules[0]) == USED_LEGACY
    del t
    gc.collect()
    assert p.deleted == 1


def test_read_only_flag_is_kept_and_never_exported_as_writable():
    x = matrix(32, 32)
    p = Producer(x, flags=READ_ONLY)
    t = _mx.import_tensor(p)
    assert not np.asarray(t).flags.writeable  # the buffer protocol says read only
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()  # a legacy capsule cannot carry the flag
    data, shape, _, flags, _ = consume(t.__dlpack__(max_version=(1, 0)))
    assert flags & READ_ONLY and shape == [32, 32] and data == x.tobytes()
    # mxkit only reads: validation of a read-only copy works.
    c = mxkit.quantize(x, "mxfp4")
    assert mxkit.validate(Producer(x, flags=READ_ONLY), Producer(c.codes, flags=READ_ONLY),
                          Producer(c.scales, flags=READ_ONLY), fmt="mxfp4").ok
    del t
    gc.collect()
    assert p.deleted == 1


def test_a_newer_major_version_is_refused_and_left_to_its_producer():
    p = Producer(matrix(32, 32), major=2)
    with pytest.raises(BufferError, match="DLPack 2.0"):
        _mx.import_tensor(p)
    # Not consumed: the name is unchanged, so the producer's capsule destructor frees it.
    assert capsule_name(p.capsules[0]) == NAME_VERSIONED and p.deleted == 0


def test_byte_offset_strides_and_absent_strides():
    big = matrix(64, 128)
    right = big[:, 64:]  # byte_offset 256 from the row start, row stride 128
    p = Producer(right, byte_offset=64 * 4)
    t = _mx.import_tensor(p)
    assert t.data_ptr == right.__array_interface__["data"][0]
    np.testing.assert_array_equal(mxkit.quantize(t, "mxfp4").codes, mxkit.quantize(np.ascontiguousarray(right), "mxfp4").codes)
    x = matrix(32, 64)
    u = _mx.import_tensor(Producer(x, strides=None))  # null strides: compact row-major
    np.testing.assert_array_equal(np.asarray(u), x)
    # Codes must be contiguous: a strided view is refused, not read past.
    c = mxkit.quantize(x, "mxfp8_e4m3")
    wide = np.zeros((32, 128), np.uint8)
    wide[:, ::2] = c.codes
    with pytest.raises(ValueError, match="contiguous"):
        mxkit.validate(x, Producer(wide[:, ::2]), c.scales, fmt="mxfp8_e4m3")


@pytest.mark.parametrize("bad", [dict(ndim=-1), dict(ndim=40), dict(null_shape=True), dict(shape=[32, -1]),
                                 dict(lanes=2), dict(bits=4)])
def test_a_corrupt_tensor_is_a_value_error_and_still_released(bad):
    p = Producer(matrix(32, 32), **bad)
    with pytest.raises(ValueError, match="DLPack tensor"):
        _mx.import_tensor(p)
    gc.collect()
    assert p.deleted == 1  # consumed, then released exactly once


def test_many_imports_and_exports_release_each_tensor_once():
    x = matrix(16, 32)
    p = Producer(x)
    for i in range(200):
        t = _mx.import_tensor(p)
        cap = t.__dlpack__(max_version=(1, 0)) if i % 2 else t.__dlpack__()
        del t  # our capsule keeps the producer's tensor alive
        if i % 3:
            data, shape, strides, _, _ = consume(cap)  # consumed: our deleter releases it
            assert data == x.tobytes() and shape == [16, 32] and strides == [32, 1]
        del cap  # unconsumed ones: our capsule destructor releases them
    gc.collect()
    assert p.deleted == 200


# ---- producing capsules --------------------------------------------------------------------
def test_export_honours_copy_and_dl_device():
    x = matrix(8, 32)
    t = _mx.import_tensor(x)
    data, shape, _, flags, ptr = consume(t.__dlpack__(max_version=(1, 0), copy=True))
    assert flags & IS_COPIED and ptr != x.__array_interface__["data"][0] and data == x.tobytes()
    _, _, _, flags, ptr = consume(t.__dlpack__(max_version=(1, 0), dl_device=(KDLCPU, 0), copy=False))
    assert flags is None and ptr == x.__array_interface__["data"][0]  # nothing to flag: a legacy capsule
    # Versioned only where the flags say something (module.cpp export_capsule says why).
    assert capsule_name(t.__dlpack__()) == NAME_LEGACY and capsule_name(t.__dlpack__(max_version=(1, 0))) == NAME_LEGACY
    with pytest.raises(BufferError, match="own device"):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))


# ---- the buffer protocol ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int64, np.uint16, np.bool_])
def test_buffer_formats_round_trip(dtype):
    a = (RNG.standard_normal((4, 6)) * 50).astype(dtype)
    back = np.asarray(_mx.import_tensor(a))
    assert back.dtype == a.dtype and np.shares_memory(back, a)
    np.testing.assert_array_equal(back, a)


def test_big_endian_and_structured_arrays_are_refused():
    x = matrix(32, 32)
    with pytest.raises(ValueError, match="big-endian"):
        mxkit.quantize(x.astype(">f4"), "mxfp4")
    with pytest.raises(ValueError, match="format"):
        _mx.import_tensor(np.zeros(4, dtype=[("a", "<f4"), ("b", "<i4")]))
    with pytest.raises(ValueError, match="format"):
        _mx.import_tensor(np.zeros(4, np.complex64))


def test_zero_size_and_wrong_dtype_buffers_raise_instead_of_reading():
    assert _mx.import_tensor(np.zeros((0, 4), np.float32)).shape == (0, 4)
    empty = np.zeros((0, 64), np.float32)
    row, col = mxkit.quantize(empty, "mxfp4", axis="both", scale_layout="cublas_128x4")
    assert row.codes.shape == (0, 32) and col.codes.shape == (64, 0) and row.scales.size == 0
    assert mxkit.validate(empty, row.codes, row.scales, fmt="mxfp4", scale_layout="cublas_128x4").elements_checked == 0
    x = matrix(32, 64)
    c = mxkit.quantize(x, "mxfp4")
    with pytest.raises(ValueError, match="holds 0 bytes"):
        mxkit.validate(x, np.zeros(0, np.uint8), c.scales, fmt="mxfp4")
    with pytest.raises(ValueError, match="must hold bytes"):
        mxkit.validate(x, c.codes.astype(np.int64), c.scales, fmt="mxfp4")


def test_read_only_numpy_arrays_are_read_in_place():
    x = matrix(64, 64)
    c = mxkit.quantize(x, "mxfp6_e2m3")
    for a in (x, c.codes, c.scales):
        a.setflags(write=False)
    assert mxkit.validate(x, c.codes, c.scales, fmt="mxfp6_e2m3").ok
    np.testing.assert_array_equal(mxkit.quantize(x, "mxfp6_e2m3").codes, c.codes)


def test_temporaries_passed_in_outlive_the_call():
    # The arguments are temporaries that nothing else references: mxkit's tensors own them.
    x = matrix(128, 64)
    c = mxkit.quantize(x, "mxfp4")
    r = mxkit.validate(np.array(x), np.array(c.codes).copy(), c.scales.copy(), fmt="mxfp4")
    assert r.ok
    t = _mx.import_tensor(np.arange(64, dtype=np.float32).reshape(2, 32) * 2)
    gc.collect()
    np.testing.assert_array_equal(np.asarray(t), np.arange(64, dtype=np.float32).reshape(2, 32) * 2)


def test_torch_tensors_that_require_grad_are_read():
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 128, requires_grad=True)
    c = mxkit.quantize(x, "mxfp8_e4m3")
    np.testing.assert_array_equal(c.codes.numpy(), mxkit.quantize(x.detach().numpy(), "mxfp8_e4m3").codes)
    assert mxkit.validate(x, c.codes, c.scales, fmt="e4m3").ok


def test_cuda_tensor_descriptions_are_checked_and_own_their_owner():
    """_mxkit.cuda_tensor (the torch path without a capsule, mxkit._torch_cuda_ref) checks what
    it is told before anything reads through it, and holds its owner until the last reference."""
    with pytest.raises(ValueError, match="dtype code 3"):
        _mx.cuda_tensor(0x1000, 3, 8, [2, 2], [], 0, None)
    with pytest.raises(ValueError, match="12-bit"):
        _mx.cuda_tensor(0x1000, 1, 12, [2, 2], [], 0, None)
    with pytest.raises(ValueError, match="2 extents and 1 strides"):
        _mx.cuda_tensor(0x1000, 1, 8, [2, 2], [1], 0, None)
    with pytest.raises(ValueError, match="negative extent -2"):
        _mx.cuda_tensor(0x1000, 1, 8, [2, -2], [], 0, None)
    with pytest.raises(ValueError, match="null data pointer"):
        _mx.cuda_tensor(0, 2, 32, [2, 2], [], 0, None)
    with pytest.raises(ValueError, match="device index -1"):
        _mx.cuda_tensor(0x1000, 2, 32, [2, 2], [], -1, None)

    class Owner:
        pass
    import weakref
    owner = Owner()
    alive = weakref.ref(owner)
    t = _mx.cuda_tensor(0x1000, 4, 16, [4, 8], [8, 1], 0, owner)
    assert t.device == "cuda:0" and t.dtype == "bfloat16" and tuple(t.shape) == (4, 8) and t.data_ptr == 0x1000
    del owner
    gc.collect()
    assert alive() is not None  # the tensor holds it
    del t
    gc.collect()
    assert alive() is None
    # A host function refuses it as it refuses any device tensor, before reading.
    with pytest.raises(ValueError, match="host"):
        mxkit.validate(np.zeros((32, 32), np.float32), _mx.cuda_tensor(0x1000, 1, 8, [32, 32], [], 0, None),
                       np.zeros((32, 1), np.uint8), fmt="mxfp8_e4m3")


def test_quantize_device_raw_checks_before_any_launch():
    """_mxkit.quantize_device_raw (mxkit.quantize's torch path: pointers only) takes its
    descriptions as they are and refuses a mismatch before anything is launched; a module built
    without a GPU backend says so."""
    d = mxkit._describe("quantize", 64, 128, "mxfp8_e4m3", "rowwise")
    col = mxkit._describe("quantize", 64, 128, "mxfp8_e4m3", "columnwise")
    with pytest.raises(ValueError, match="3 outputs for 1 copies"):
        _mx.quantize_device_raw(0x1000, 2, 32, 64, 128, 128, 0, d, None, 1, [0x2000, 0x3000, 0x4000])
    with pytest.raises(ValueError, match="2 outputs for 2 copies"):
        _mx.quantize_device_raw(0x1000, 2, 32, 64, 128, 128, 0, d, col, 1, [0x2000, 0x3000])
    with pytest.raises(ValueError, match="must be float32, bfloat16 or float16"):
        _mx.quantize_device_raw(0x1000, 1, 8, 64, 128, 128, 0, d, None, 1, [0x2000, 0x3000])
    with pytest.raises(ValueError, match="row stride 100 is smaller than its 128 columns"):
        _mx.quantize_device_raw(0x1000, 2, 32, 64, 128, 100, 0, d, None, 1, [0x2000, 0x3000])
    if not mxkit.has_gpu():
        with pytest.raises(RuntimeError, match="without a GPU backend"):
            _mx.quantize_device_raw(0x1000, 2, 32, 64, 128, 128, 0, d, None, 1, [0x2000, 0x3000])
