// SPDX-License-Identifier: Apache-2.0
// _mxkit: the thin C++ layer under the Python package `mxkit` (python/mxkit/__init__.py). It
// reads tensors in place (DLPack capsules from torch, CuPy, JAX or NumPy; the buffer protocol for
// NumPy), checks every buffer's size against the layout it is read through, and calls the host
// oracle (ref/) or the device launchers (device.hpp). Arguments are already normalized by the
// Python layer: enum values arrive as mxkit's own names (enum_names), shapes as integers.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/error.hpp>
#include <mxkit/host/host_backend.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/nn/delayed_scaling.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/validation/diagnose.hpp>
#include <mxkit/validation/nvfp4_presets.hpp>
#include <mxkit/validation/peer_presets.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/validation/validate.hpp>
#include <mxkit/validation/validate_gemm.hpp>
#include <mxkit/version.hpp>

#include "device.hpp"
#include "dlpack.hpp"
#include "linear_run.hpp"
#include "tensor_ref.hpp"

namespace py = pybind11;
using namespace mxkit_python;

namespace mxkit_python {

std::string tensor_ref::dtype_name() const {
  const char* base = dtype.code == dlpack::kDLFloat    ? "float"
                     : dtype.code == dlpack::kDLBfloat ? "bfloat"
                     : dtype.code == dlpack::kDLInt    ? "int"
                     : dtype.code == dlpack::kDLUInt   ? "uint"
                     : dtype.code == dlpack::kDLBool   ? "bool"
                                                       : "code";
  std::string s = std::string(base) + std::to_string(dtype.bits);
  if (dtype.code > dlpack::kDLBool) s = "dlpack type code " + std::to_string(dtype.code) + " (" + std::to_string(dtype.bits) + " bits)";
  if (dtype.lanes != 1) s += "x" + std::to_string(dtype.lanes);
  return s;
}
std::string tensor_ref::describe() const {
  std::ostringstream s;
  s << dtype_name() << " [";
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "] on " << (on_host() ? "cpu" : on_cuda() ? "cuda:" + std::to_string(device.device_id) : "device type " + std::to_string(device.device_type));
  return s.str();
}

namespace {

[[noreturn]] void value_error(const std::string& m) { throw py::value_error(m); }

// ---- tracing (MXKIT_PYTHON_TRACE=1) -------------------------------------------------------
// Every import, export and deleter call on stderr with its pointers, so a crash in a device run
// can be matched to the capsule whose lifetime went wrong (scripts/gpu.sh python).
bool tracing() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("MXKIT_PYTHON_TRACE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}
template <class... A>
void trace(const A&... parts) {
  if (!tracing()) return;
  std::ostringstream s;
  s << "[mxkit] ";
  (s << ... << parts);
  s << "\n";
  std::fputs(s.str().c_str(), stderr);
  std::fflush(stderr);
}

// ---- DLPack in ----------------------------------------------------------------------------
// The limits a DLTensor is checked against before anything reads through it: a producer's
// corrupt or unsupported tensor is a ValueError, never a read through a bad pointer.
inline constexpr std::int32_t max_ndim = 32;

// Owns a consumed DLPack tensor: the producer's deleter runs exactly once, when the last
// tensor_ref sharing it is gone (DLPack: "the consumer must call the deleter when done"). The
// deleter may run without the GIL (torch, CuPy and NumPy >= 1.25 take it themselves if needed).
template <class Managed>
std::shared_ptr<void> own_managed(Managed* m) {
  return std::shared_ptr<void>(m, [](void* p) {
    Managed* mt = static_cast<Managed*>(p);
    trace("deleter of ", dlpack::capsule_name<Managed>(), " ", p);
    if (mt->deleter) mt->deleter(mt);
  });
}

// Reads the DLTensor of an owned managed tensor into a tensor_ref, checking every field first.
tensor_ref from_dltensor(const dlpack::DLTensor& t, std::shared_ptr<void> owner, bool read_only) {
  tensor_ref r;
  r.owner = std::move(owner);  // first: an error below still releases the producer's tensor
  if (t.ndim < 0 || t.ndim > max_ndim) value_error("a DLPack tensor with ndim " + std::to_string(t.ndim) + "; mxkit reads 0 to 32 axes");
  if (t.ndim > 0 && t.shape == nullptr) value_error("a DLPack tensor with a null shape");
  if (t.dtype.lanes != 1) value_error("a DLPack tensor with " + std::to_string(t.dtype.lanes) + " lanes; mxkit reads scalar dtypes");
  if (t.dtype.bits == 0 || t.dtype.bits % 8 != 0) value_error("a DLPack tensor of " + std::to_string(t.dtype.bits) + "-bit elements; mxkit reads whole bytes");
  r.device = t.device;
  r.dtype = t.dtype;
  r.read_only = read_only;
  r.shape.assign(t.shape, t.shape + t.ndim);
  for (std::int64_t e : r.shape)
    if (e < 0) value_error("a DLPack tensor with a negative extent " + std::to_string(e));
  if (t.strides != nullptr) r.strides.assign(t.strides, t.strides + t.ndim);
  if (t.data == nullptr && r.elements() != 0) value_error("a DLPack tensor with a null data pointer and " + std::to_string(r.elements()) + " elements");
  r.data = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  return r;
}

// Consumes a DLPack capsule (dlpack.h, "the capsule protocol"): checks the name, renames it
// used_dltensor[_versioned] so the producer's capsule destructor leaves the tensor to us, and
// owns it from that moment. A versioned tensor of a major version mxkit does not know is not
// consumed (its layout past `version` is unknown): the producer's capsule destructor frees it.
tensor_ref from_capsule(py::handle capsule) {
  PyObject* c = capsule.ptr();
  if (PyCapsule_IsValid(c, "dltensor_versioned")) {
    auto* m = static_cast<dlpack::DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, "dltensor_versioned"));
    if (m->version.major != 1)
      throw py::buffer_error("a DLPack " + std::to_string(m->version.major) + "." + std::to_string(m->version.minor) +
                             " tensor; mxkit reads DLPack 1.x (versioned) and 0.x (legacy) tensors");
    if (PyCapsule_SetName(c, "used_dltensor_versioned") != 0) throw py::error_already_set();
    trace("import dltensor_versioned ", static_cast<void*>(m), " flags ", m->flags);
    return from_dltensor(m->dl_tensor, own_managed(m), (m->flags & dlpack::flag_read_only) != 0);
  }
  if (PyCapsule_IsValid(c, "dltensor")) {
    auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    if (PyCapsule_SetName(c, "used_dltensor") != 0) throw py::error_already_set();
    trace("import dltensor ", static_cast<void*>(m));
    return from_dltensor(m->dl_tensor, own_managed(m), false);
  }
  value_error("__dlpack__ returned something that is not an unconsumed DLPack capsule");
}

// The dtype of a buffer-protocol format string (PEP 3118): one native or little-endian scalar.
dlpack::DLDataType buffer_dtype(const char* format, Py_ssize_t itemsize) {
  std::string f = format ? format : "B";
  const std::string whole = f;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<' || f[0] == '>' || f[0] == '!')) {
    constexpr bool little = std::endian::native == std::endian::little;
    const bool big = f[0] == '>' || f[0] == '!';
    if (big == little && itemsize > 1) value_error("a big-endian array (format '" + whole + "'); pass it as native byte order, e.g. x.astype(x.dtype.newbyteorder('='))");
    f.erase(0, 1);
  }
  if (f.size() != 1) value_error("an array of format '" + whole + "'; mxkit reads float32, float16, bfloat16 and one-byte codes");
  const auto bits = static_cast<std::uint8_t>(8 * itemsize);
  switch (f[0]) {
    case 'f': case 'd': case 'e': return {dlpack::kDLFloat, bits, 1};
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'c': return {dlpack::kDLUInt, bits, 1};
    case 'b': case 'h': case 'i': case 'l': case 'q': return {dlpack::kDLInt, bits, 1};
    case '?': return {dlpack::kDLBool, bits, 1};
    default: value_error("an array of format '" + whole + "'; mxkit reads float32, float16, bfloat16 and one-byte codes");
  }
}

// A host array through the buffer protocol (NumPy, memoryview, bytes, array.array): read in
// place; the Py_buffer holds a reference to the exporter until the tensor_ref is gone. Read-only
// arrays are taken (NumPy's legacy __dlpack__ refuses them).
tensor_ref from_buffer(py::handle obj) {
  auto* view = new Py_buffer;
  if (PyObject_GetBuffer(obj.ptr(), view, PyBUF_RECORDS_RO) != 0) {
    delete view;
    throw py::error_already_set();
  }
  tensor_ref r;
  r.owner = std::shared_ptr<void>(view, [](void* p) {
    auto* v = static_cast<Py_buffer*>(p);
    trace("release buffer ", v->buf);
    // Released with the GIL; at interpreter exit there is nothing left to release into.
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      PyBuffer_Release(v);
    }
    delete v;
  });
  if (view->ndim < 0 || view->ndim > max_ndim) value_error("a buffer with " + std::to_string(view->ndim) + " axes");
  if (view->itemsize <= 0) value_error("a buffer with item size " + std::to_string(view->itemsize));
  r.data = view->buf;
  r.read_only = view->readonly != 0;
  r.dtype = buffer_dtype(view->format, view->itemsize);
  for (int i = 0; i < view->ndim; ++i) {
    r.shape.push_back(view->shape ? view->shape[i] : 0);
    const Py_ssize_t step = view->strides ? view->strides[i] : 0;
    if (step % view->itemsize != 0) value_error("a buffer whose strides are not whole elements");
    r.strides.push_back(step / view->itemsize);
  }
  if (view->ndim > 0 && (!view->shape || !view->strides)) value_error("a buffer without shape or strides");
  trace("import buffer ", r.data, " ", r.describe());
  return r;
}

// Any array: our own tensor; a host array with the buffer protocol (NumPy: read-only arrays and
// any NumPy version, no NumPy C API in this module); else DLPack (torch, CuPy, JAX): __dlpack__
// with max_version=(1, 0) first, as the array API standard asks of a consumer (versioned
// capsules carry the read-only flag), then without it for producers that predate DLPack 1.0.
// `stream` is passed for device tensors so the producer orders its work before ours.
tensor_ref import_tensor(py::handle obj, py::object stream) {
  if (py::isinstance<tensor_ref>(obj)) return obj.cast<tensor_ref>();
  if (PyObject_CheckBuffer(obj.ptr())) return from_buffer(obj);
  if (!py::hasattr(obj, "__dlpack__")) value_error("expected an array (DLPack or buffer protocol), got " + std::string(py::str(py::type::of(obj))));
  bool device = false;
  if (py::hasattr(obj, "__dlpack_device__")) {
    const py::tuple d = obj.attr("__dlpack_device__")();
    const int type = d[0].cast<int>();
    device = type != dlpack::kDLCPU && type != dlpack::kDLCUDAHost;
  }
  py::dict kwargs;
  if (device && !stream.is_none()) kwargs["stream"] = stream;
  kwargs["max_version"] = py::make_tuple(1, 0);
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")(**kwargs);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    kwargs.attr("pop")("max_version");  // a pre-1.0 producer: no max_version keyword
    capsule = obj.attr("__dlpack__")(**kwargs);
  }
  return from_capsule(capsule);
}

// A CUDA tensor described by its framework's own attributes (mxkit/__init__.py's torch path:
// data_ptr, dtype, shape, strides, device index), without a DLPack capsule: exporting one costs
// torch tens of microseconds of Python per tensor, which was most of a small call's time
// (docs/perf/python.md). The caller has already ordered the tensor's producer before `stream`
// (it is the tensor's current stream). `owner` is kept alive as long as the tensor_ref is, and
// released with the GIL, as a Py_buffer is.
tensor_ref cuda_tensor(std::uintptr_t data, int code, int bits, const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& strides, int device_id, py::object owner) {
  if (code != dlpack::kDLInt && code != dlpack::kDLUInt && code != dlpack::kDLFloat && code != dlpack::kDLBfloat && code != dlpack::kDLBool)
    value_error("cuda_tensor: dtype code " + std::to_string(code) + " is not one DLPack names for a scalar mxkit reads");
  if (bits <= 0 || bits > 64 || bits % 8 != 0) value_error("cuda_tensor: " + std::to_string(bits) + "-bit elements; mxkit reads whole bytes");
  if (shape.size() > static_cast<std::size_t>(max_ndim) || (!strides.empty() && strides.size() != shape.size()))
    value_error("cuda_tensor: " + std::to_string(shape.size()) + " extents and " + std::to_string(strides.size()) + " strides");
  if (device_id < 0) value_error("cuda_tensor: device index " + std::to_string(device_id));
  tensor_ref r;
  if (!owner.is_none()) {  // None: the caller holds the memory for the call (quantize_device_raw)
    PyObject* o = owner.release().ptr();
    r.owner = std::shared_ptr<void>(o, [](void* p) {
      if (Py_IsInitialized()) {
        py::gil_scoped_acquire gil;
        Py_DECREF(static_cast<PyObject*>(p));
      }
    });
  }
  r.device = {dlpack::kDLCUDA, device_id};
  r.dtype = {static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  r.shape = shape;
  for (std::int64_t e : r.shape)
    if (e < 0) value_error("cuda_tensor: a negative extent " + std::to_string(e));
  r.strides = strides;
  r.data = reinterpret_cast<void*>(data);
  if (r.data == nullptr && r.elements() != 0) value_error("cuda_tensor: a null data pointer and " + std::to_string(r.elements()) + " elements");
  return r;
}

// ---- DLPack out ---------------------------------------------------------------------------
struct export_context {
  std::vector<std::int64_t> shape, strides;
  std::shared_ptr<void> owner;
};
template <class Managed>
Managed* make_managed(const tensor_ref& t) {
  auto* ctx = new export_context{t.shape, t.strides, t.owner};
  if (ctx->strides.empty()) {  // explicit compact strides (DLPack 1.2 asks producers for them)
    ctx->strides.resize(t.shape.size());
    std::int64_t step = 1;
    for (std::size_t i = t.shape.size(); i-- > 0;) {
      ctx->strides[i] = step;
      step *= t.shape[i];
    }
  }
  auto* m = new Managed{};
  m->manager_ctx = ctx;
  // Called once by the consumer, possibly without the GIL and on another thread: it touches no
  // Python object (an owner that is a Py_buffer takes the GIL itself).
  m->deleter = [](Managed* self) {
    trace("our deleter ", static_cast<void*>(self));
    delete static_cast<export_context*>(self->manager_ctx);
    delete self;
  };
  dlpack::DLTensor& d = m->dl_tensor;
  d.data = t.data;
  d.device = t.device;
  d.ndim = static_cast<std::int32_t>(t.shape.size());
  d.dtype = t.dtype;
  d.shape = ctx->shape.data();
  d.strides = ctx->strides.data();
  d.byte_offset = 0;
  return m;
}
// The capsule destructors: free the tensor only if no consumer took it (renamed it).
template <class Managed>
void capsule_destructor(PyObject* c) {
  if (PyCapsule_IsValid(c, dlpack::capsule_name<Managed>())) {
    auto* mt = static_cast<Managed*>(PyCapsule_GetPointer(c, dlpack::capsule_name<Managed>()));
    trace("unconsumed capsule ", static_cast<void*>(mt));
    mt->deleter(mt);
  }
}

// The capsule of a managed tensor, made with the C API itself (its name and destructor exactly
// as dlpack.h's capsule protocol says, whatever pybind11's capsule constructors do).
template <class Managed>
py::capsule new_capsule(Managed* m) {
  PyObject* c = PyCapsule_New(m, dlpack::capsule_name<Managed>(), &capsule_destructor<Managed>);
  if (c == nullptr) {
    m->deleter(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(c);
}

// A host copy of a host tensor (copy=True): compact, owned by a new vector.
tensor_ref host_copy(const tensor_ref& t) {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(t.nbytes());
  if (!t.compact()) throw py::buffer_error("mxkit copies only contiguous tensors when exporting them");
  if (!bytes->empty()) std::memcpy(bytes->data(), t.data, bytes->size());
  tensor_ref r = t;
  r.data = bytes->data();
  r.owner = bytes;
  r.strides.clear();
  r.read_only = false;
  return r;
}

// Tensor.__dlpack__(stream=None, max_version=None, dl_device=None, copy=None) (array API).
py::capsule export_capsule(const tensor_ref& t, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
  if (!dl_device.is_none()) {
    const py::tuple d = dl_device.cast<py::tuple>();
    if (d.size() != 2 || d[0].cast<int>() != t.device.device_type || d[1].cast<int>() != t.device.device_id)
      throw py::buffer_error("mxkit exports a tensor only on its own device (" + t.describe() + "); copy it with the consumer's framework");
  }
  const bool make_copy = !copy.is_none() && copy.cast<bool>();
  if (make_copy && !t.on_host()) throw py::buffer_error("mxkit copies only host tensors when exporting them; this one is " + t.describe());
  if (t.on_cuda()) {
    // None: the legacy default stream (DLPack's 1); -1: the consumer asks for no synchronization
    // (array API); otherwise the consumer's stream waits for the stream our writes went to, on
    // the device, without a host wait.
    const auto s = stream.is_none() ? std::intptr_t{1} : stream.cast<std::intptr_t>();
    if (s == 0) throw py::value_error("stream 0 is ambiguous on CUDA (DLPack): pass 1 for the legacy default stream or a stream handle");
    // t.stream 0: a tensor mxkit did not write (an import re-exported); its producer ordered it.
    if (s != -1 && t.stream != 0 && static_cast<std::uintptr_t>(s) != t.stream) {
      device::stream_wait(static_cast<std::uintptr_t>(s), t.stream, t.device.device_id);
      if (t.pool) t.pool->used_on(static_cast<std::uintptr_t>(s));  // its free waits for the consumer's work too
    }
  }
  const tensor_ref out = make_copy ? host_copy(t) : t;
  const bool consumer_reads_versioned = !max_version.is_none() && max_version.cast<py::tuple>()[0].cast<int>() >= 1;
  // A versioned capsule only where its flags say something (read only, a copy); otherwise the
  // legacy one, which every consumer reads (the array API lets a producer answer a 1.x consumer
  // with it). On an H200 with PyTorch 2.11, torch.from_dlpack of our versioned capsule of a
  // device result crashed the process at once, where the legacy capsule had worked on an H100
  // the session before (docs/perf/python.md); the cause is not established.
  const std::uint64_t flags = (out.read_only ? dlpack::flag_read_only : 0) | (make_copy ? dlpack::flag_is_copied : 0);
  if (consumer_reads_versioned && flags != 0) {
    auto* m = make_managed<dlpack::DLManagedTensorVersioned>(out);
    m->version = {1, 0};
    m->flags = flags;
    trace("export dltensor_versioned ", static_cast<void*>(m), " ", out.describe());
    return new_capsule(m);
  }
  // A legacy capsule cannot say "read only" (array API: such an export raises BufferError).
  if (out.read_only) throw py::buffer_error("a read-only tensor exports only as a versioned DLPack capsule (max_version=(1, 0))");
  auto* m = make_managed<dlpack::DLManagedTensor>(out);
  trace("export dltensor ", static_cast<void*>(m), " ", out.describe());
  return new_capsule(m);
}

// A host tensor_ref over a vector we hand over (results: zero copy out).
tensor_ref host_result(std::vector<std::uint8_t>&& bytes, std::vector<std::int64_t> shape, dlpack::DLDataType dtype) {
  auto owned = std::make_shared<std::vector<std::uint8_t>>(std::move(bytes));
  tensor_ref r;
  r.data = owned->data();
  r.owner = owned;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}
// As a NumPy array sharing the memory, through the buffer protocol (numpy.asarray): this module
// uses no NumPy C API, so one build works with NumPy 1.x and 2.x alike.
py::object to_numpy(const tensor_ref& t) { return py::module_::import("numpy").attr("asarray")(py::cast(t)); }
py::object numpy_bytes(std::vector<std::uint8_t>&& v, std::vector<std::int64_t> shape) {
  return to_numpy(host_result(std::move(v), std::move(shape), {dlpack::kDLUInt, 8, 1}));
}
py::object numpy_floats(std::vector<float>&& v, std::vector<std::int64_t> shape) {
  std::vector<std::uint8_t> b(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return to_numpy(host_result(std::move(b), std::move(shape), {dlpack::kDLFloat, 32, 1}));
}
// A NumPy array of `dtype` from a vector (report fields), by numpy.array over a list.
template <class T>
py::object numpy_list(const std::vector<T>& v, const char* dtype) {
  return py::module_::import("numpy").attr("array")(py::cast(v), py::arg("dtype") = dtype);
}

// The PEP 3118 format of a host tensor's buffer: the scalar types by name; bfloat16 and the
// 8-bit float types as their raw bits (uint16, uint8), which NumPy has no type for.
std::string buffer_format(const tensor_ref& t) {
  const unsigned bits = t.dtype.bits;
  if (t.dtype.lanes != 1) throw py::buffer_error("a vector dtype has no buffer format: " + t.describe());
  if (t.dtype.code == dlpack::kDLFloat && (bits == 16 || bits == 32 || bits == 64)) return bits == 16 ? "e" : bits == 32 ? "f" : "d";
  if (t.dtype.code == dlpack::kDLInt && bits <= 64) return bits == 8 ? "b" : bits == 16 ? "h" : bits == 32 ? "i" : "q";
  if (t.dtype.code == dlpack::kDLBool && bits == 8) return "?";
  if (bits == 8) return "B";
  if (bits == 16) return "H";
  if (bits == 32) return "I";
  if (bits == 64) return "Q";
  throw py::buffer_error("no buffer format for " + t.describe());
}

// ---- argument checks ----------------------------------------------------------------------
template <class E>
E parse_enum(const std::string& name, const char* what) {
  for (std::size_t i = 0; i < mxkit::enum_count<E>; ++i)
    if (name == mxkit::enum_names<E>::names[i]) return static_cast<E>(i);
  std::string choices;
  for (std::size_t i = 0; i < mxkit::enum_count<E>; ++i) choices += std::string(i ? ", " : "") + mxkit::enum_names<E>::names[i];
  value_error(std::string(what) + " '" + name + "' is not one of " + choices);
}

// A byte buffer (codes or scales): compact, one-byte elements, on the host.
struct byte_buffer {
  const std::uint8_t* data;
  std::size_t size;
};
// Codes are one-byte integers or one-byte float types (their bit patterns); a bool or a wider
// array is not a byte buffer, and casting it would invent codes.
bool byte_dtype(const tensor_ref& t) noexcept { return t.dtype.bits == 8 && t.dtype.lanes == 1 && t.dtype.code != dlpack::kDLBool; }
byte_buffer host_bytes(const tensor_ref& t, const char* what) {
  if (!t.on_host()) value_error(std::string(what) + " is " + t.describe() + "; this entry point reads host memory");
  if (!byte_dtype(t)) value_error(std::string(what) + " must hold bytes (uint8, int8 or an 8-bit float type), got " + t.describe());
  if (!t.compact()) value_error(std::string(what) + " must be contiguous (row-major), got strides that are not");
  return {static_cast<const std::uint8_t*>(t.data), t.nbytes()};
}
// at_least: a buffer may hold more than the description reads (a padded scale allocation, whose
// other layouts the diagnosis tries); otherwise its size must match, since a copy read through a
// description of another shape gives numbers without an error.
enum class size_rule : bool { exact, at_least };
void check_size(const char* entry, const char* what, std::size_t have, std::size_t need, const std::string& layout, size_rule rule = size_rule::exact) {
  if (have < need || (rule == size_rule::exact && have != need))
    value_error(std::string(entry) + ": " + what + " holds " + std::to_string(have) + " bytes, but " + layout + (have < need ? " needs " : " holds ") +
                std::to_string(need) + "; check the description (fmt, shape, axis, scale_layout, preset) against " + what);
}

// The 2-D high-precision input: float32, bfloat16 or float16, unit column stride.
struct matrix_arg {
  const void* data;
  device::input_type type;
  std::size_t rows, cols, ld;
};
matrix_arg input_matrix(const tensor_ref& t, const char* entry, const char* name = "x") {
  if (t.shape.size() != 2) value_error(std::string(entry) + ": " + name + " must be 2-D [rows, cols], got " + t.describe());
  device::input_type type;
  if (t.dtype.code == dlpack::kDLFloat && t.dtype.bits == 32) type = device::input_type::f32;
  else if (t.dtype.code == dlpack::kDLBfloat && t.dtype.bits == 16) type = device::input_type::bf16;
  else if (t.dtype.code == dlpack::kDLFloat && t.dtype.bits == 16) type = device::input_type::f16;
  else value_error(std::string(entry) + ": " + name + " must be float32, bfloat16 or float16, got " + t.describe());
  if (t.dtype.lanes != 1) value_error(std::string(entry) + ": " + name + " has a vector dtype");
  const std::size_t rows = static_cast<std::size_t>(t.shape[0]), cols = static_cast<std::size_t>(t.shape[1]);
  std::size_t ld = cols;
  if (!t.strides.empty()) {
    if (cols > 1 && t.strides[1] != 1) value_error(std::string(entry) + ": " + name + "'s columns must be contiguous (stride 1), got stride " + std::to_string(t.strides[1]) + "; pass a contiguous copy");
    if (rows > 1) {
      if (t.strides[0] < static_cast<std::int64_t>(cols)) value_error(std::string(entry) + ": " + name + "'s row stride " + std::to_string(t.strides[0]) + " is smaller than its " + std::to_string(cols) + " columns; pass a contiguous copy");
      ld = static_cast<std::size_t>(t.strides[0]);
    }
  }
  return {t.data, type, rows, cols, ld};
}
template <class F>
decltype(auto) with_host_matrix(const matrix_arg& m, F&& f) {
  switch (m.type) {
    case device::input_type::bf16:
      return f(mxkit::matrix_view<const mxkit::bfloat16>{static_cast<const mxkit::bfloat16*>(m.data), m.rows, m.cols, m.ld});
    case device::input_type::f16:
      return f(mxkit::matrix_view<const mxkit::float16>{static_cast<const mxkit::float16*>(m.data), m.rows, m.cols, m.ld});
    case device::input_type::f32: break;
  }
  return f(mxkit::matrix_view<const float>{static_cast<const float*>(m.data), m.rows, m.cols, m.ld});
}

// ---- copy descriptions --------------------------------------------------------------------
// Everything that says how one MX copy is stored and was quantized: the layout, the options,
// the storage (tensor/foreign_layout.hpp) and a peer's quirks, from a preset name and overrides.
struct copy_description {
  std::string preset = "mxkit";
  std::string name = "mxkit";
  mxkit::block_layout layout;
  mxkit::quantize_options options;
  mxkit::mx_storage storage;
  mxkit::ref::peer_quirks quirks;
  std::optional<mxkit::ref::peer_preset> peer;

  // The view of buffers checked to hold data_bytes() and scale_bytes() (check_size).
  mxkit::mx_foreign_view view(const std::uint8_t* data, const std::uint8_t* scales) const {
    return {layout, options, storage, {data, data ? data_bytes() : 0}, {scales, scales ? scale_bytes() : 0}};
  }
  // The same over the whole buffers: the diagnosis tries layouts by what the buffers hold (an
  // aiter_shuffle buffer is larger than the row_major description it was given with).
  mxkit::mx_foreign_view view(const byte_buffer& data, const byte_buffer& scales) const {
    return {layout, options, storage, {data.data, data.size}, {scales.data, scales.size}};
  }
  std::size_t data_bytes() const { return mxkit::mx_foreign_view{layout, options, storage}.data_span(); }
  std::size_t scale_bytes() const { return mxkit::mx_foreign_view{layout, options, storage}.scale_span(); }
  // mxkit's own storage (any scale layout): what the device quantizer and GEMM write and read.
  bool own_storage() const {
    const mxkit::mx_storage own = mxkit::own_storage(storage.scales);
    return !quirks.any() && storage.columnwise == own.columnwise && storage.nibbles == own.nibbles && storage.data_ld == 0 &&
           storage.padding_stored && storage.scale_line_stride == 0 && storage.scale_padded.lines == 0 && storage.scale_padded.blocks == 0;
  }
  std::vector<std::int64_t> data_shape() const {
    const auto v = view(nullptr, nullptr);
    return {static_cast<std::int64_t>(v.stored_rows()), static_cast<std::int64_t>(v.data_ld())};
  }
  std::vector<std::int64_t> scale_shape() const {
    const auto v = view(nullptr, nullptr);
    const mxkit::scale_extent e = v.stored_scale_extent();
    if (storage.scales != mxkit::scale_layout::row_major) return {static_cast<std::int64_t>(e.size())};
    if (storage.scale_line_stride == 0) return {static_cast<std::int64_t>(e.lines), static_cast<std::int64_t>(e.blocks)};
    if (storage.scale_line_stride == 1 && storage.scale_block_stride == e.lines)
      return {static_cast<std::int64_t>(e.blocks), static_cast<std::int64_t>(e.lines)};  // block index slow (TE columnwise)
    return {static_cast<std::int64_t>(v.scale_span())};
  }
  std::string what() const {  // "a rowwise mxfp4 128x64 copy (torchao to_mx FLOOR (mxfp4))"
    std::ostringstream s;
    s << "a " << mxkit::name_of(layout.axis) << " " << mxkit::format_name(layout.format) << " " << layout.rows << "x" << layout.cols << " copy";
    if (storage.scales != mxkit::scale_layout::row_major) s << " with " << mxkit::name_of(storage.scales) << " scales";
    s << " (" << name << ")";
    return s.str();
  }
};

mxkit::ref::peer_preset make_preset(const std::string& preset, mxkit::mx_type type, mxkit::scale_layout scales) {
  using mxkit::ref::torchao_scale_mode;
  if (preset == "torchao_floor") return mxkit::ref::peers::torchao_to_mx(type, torchao_scale_mode::floor, scales);
  if (preset == "torchao_rceil") return mxkit::ref::peers::torchao_to_mx(type, torchao_scale_mode::rceil, scales);
  if (preset == "torchao_ceil") return mxkit::ref::peers::torchao_to_mx(type, torchao_scale_mode::ceil, scales);
  if (preset == "torchao_even") return mxkit::ref::peers::torchao_to_mx(type, torchao_scale_mode::even, scales);
  if (preset == "te_mxfp8") return mxkit::ref::peers::te_mxfp8(type, scales);
  if (preset == "rocm_te_mxfp4" || preset == "rocm_te_mxfp4_software") {
    if (type != mxkit::mx_type::mxfp4) value_error("preset " + preset + " is MXFP4 only, got " + mxkit::name_of(type));
    return mxkit::ref::peers::rocm_te_mxfp4(preset == "rocm_te_mxfp4" ? mxkit::ref::rocm_fp4_path::hardware : mxkit::ref::rocm_fp4_path::software, scales);
  }
  value_error("unknown preset '" + preset +
              "'; one of mxkit, torchao_floor, torchao_rceil, torchao_ceil, torchao_even, te_mxfp8, rocm_te_mxfp4, rocm_te_mxfp4_software");
}

copy_description describe_copy(std::size_t rows, std::size_t cols, const std::string& format, const std::string& axis, const std::string& preset,
                               std::optional<std::string> layout, std::optional<std::string> rule, std::optional<std::string> rounding,
                               std::optional<bool> hadamard, bool random_signs, std::uint64_t seed, std::uint32_t philox_stream,
                               std::optional<std::string> nibbles, std::optional<std::string> columnwise, std::optional<bool> padding_stored) {
  copy_description d;
  d.preset = preset;
  d.layout = {mxkit::format_of(parse_enum<mxkit::mx_type>(format, "format")), parse_enum<mxkit::block_axis>(axis, "axis"), rows, cols};
  mxkit::detail::check_mx_layout(d.layout, "describe_copy");
  const mxkit::scale_layout scales = layout ? parse_enum<mxkit::scale_layout>(*layout, "scale_layout") : mxkit::scale_layout::row_major;
  if (preset == "mxkit") {
    d.storage = mxkit::own_storage(scales);
  } else {
    try {
      d.peer = make_preset(preset, d.layout.mx(), scales);
    } catch (const std::invalid_argument& e) {  // the peer's own rule, said with the arguments that broke it
      value_error("preset '" + preset + "' with fmt " + format + " and scale_layout " + mxkit::name_of(scales) + ": " + e.what());
    }
    d.name = d.peer->name;
    d.options = d.peer->options;
    d.quirks = d.peer->quirks;
    d.storage = d.peer->storage(d.layout.axis, rows, cols);
  }
  if (rule) d.options.rule = parse_enum<mxkit::scale_rule>(*rule, "rule");
  if (rounding) d.options.round = parse_enum<mxkit::rounding>(*rounding, "rounding");
  if (hadamard) d.options.hadamard = *hadamard;
  d.options.random_signs = random_signs;
  d.options.seed = seed;
  d.options.stream = philox_stream;
  if (nibbles) {
    // Only FP4 packs two codes in a byte: a nibble order given for another format would be ignored.
    if (d.layout.format != mxkit::formats::mxfp4)
      value_error("nibbles='" + *nibbles + "' applies to mxfp4 only, not " + mxkit::format_name(d.layout.format) + "; leave it out");
    d.storage.nibbles = parse_enum<mxkit::nibble_order>(*nibbles, "nibbles");
  }
  if (columnwise) d.storage.columnwise = parse_enum<mxkit::columnwise_storage>(*columnwise, "columnwise");
  if (padding_stored) d.storage.padding_stored = *padding_stored;
  mxkit::detail::check_options(d.options, "describe_copy");
  mxkit::detail::check_foreign_storage(d.view(nullptr, nullptr), "describe_copy");
  return d;
}

// ---- quantize / dequantize ----------------------------------------------------------------
bool same_device(const tensor_ref& a, const tensor_ref& b) noexcept {
  return (a.on_host() && b.on_host()) || (a.device.device_type == b.device.device_type && a.device.device_id == b.device.device_id);
}
std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
// An output the copy is written into (out=, or what the input's framework allocated): checked
// before anything is written, so a wrong buffer is a ValueError naming it, never a partial write.
// what_of: the output's name, a string or a callable that makes it (built only for an error: the
// device quantizer's small calls check four outputs each, issue 45's per-call overhead).
template <class What>
void check_output(const tensor_ref& t, const What& what_of, const std::vector<std::int64_t>& shape, const tensor_ref& x,
                  dlpack::DLDataType dtype = {dlpack::kDLUInt, 8, 1}) {
  const auto name = [&]() -> std::string {
    if constexpr (std::is_invocable_v<const What&>) return what_of();
    else return what_of;
  };
  if (!same_device(t, x)) value_error(name() + " is " + t.describe() + ", but x is " + x.describe() + "; pass it on x's device");
  const bool bytes = dtype.bits == 8;
  if (bytes ? !byte_dtype(t) : (t.dtype.code != dtype.code || t.dtype.bits != dtype.bits || t.dtype.lanes != 1)) {
    tensor_ref want;
    want.dtype = dtype;
    value_error(name() + " must hold " + (bytes ? std::string("bytes (uint8, int8 or an 8-bit float type)") : want.dtype_name()) + ", got " + t.describe());
  }
  if (t.shape != shape) value_error(name() + " has shape " + shape_text(t.shape) + ", but this result has shape " + shape_text(shape));
  if (!t.compact()) value_error(name() + " must be contiguous (row-major), got strides that are not");
  if (t.read_only) value_error(name() + " is read-only");
}
// out= of one copy: [codes, scales], checked against the description.
std::vector<tensor_ref> copy_outputs(py::object out, std::size_t copies) {
  std::vector<tensor_ref> refs = out.cast<std::vector<tensor_ref>>();
  if (refs.size() != 2 * copies) value_error("out holds " + std::to_string(refs.size()) + " arrays; this call writes " + std::to_string(2 * copies));
  return refs;
}
std::string part_name(const copy_description& c, int part, std::size_t copies) {
  return std::string("out (") + (copies > 1 ? std::string(mxkit::name_of(c.layout.axis)) + " " : "") + (part == 0 ? "codes)" : "scales)");
}

py::tuple quantize_host(const tensor_ref& x, const copy_description& d, unsigned threads, py::object out) {
  const matrix_arg m = input_matrix(x, "quantize");
  if (m.rows != d.layout.rows || m.cols != d.layout.cols) value_error("quantize: the description is for " + d.what() + " but x is " + x.describe());
  std::vector<tensor_ref> outs;
  if (!out.is_none()) {
    outs = copy_outputs(out, 1);
    check_output(outs[0], "quantize: " + part_name(d, 0, 1), d.data_shape(), x);
    check_output(outs[1], "quantize: " + part_name(d, 1, 1), d.scale_shape(), x);
  }
  mxkit::mx_foreign_buffers b;
  {
    py::gil_scoped_release nogil;
    b = with_host_matrix(m, [&](auto in) {
      if (d.peer) {  // the peer's options and quirks; stored with this description's storage
        mxkit::ref::peer_preset p = *d.peer;
        p.options = d.options;
        const mxkit::mx_foreign_buffers like = mxkit::ref::quantize_like(p, in, d.layout.axis, threads);
        const mxkit::mx_tensor t = mxkit::to_mx_tensor(like.view());
        return mxkit::store_foreign(t.view(), d.storage);
      }
      const mxkit::mx_tensor t = mxkit::ref::quantize(in, d.layout.mx(), d.layout.axis, d.options, threads);
      return mxkit::store_foreign(t.view(), d.storage);
    });
    if (!outs.empty()) {
      if (!b.data.empty()) std::memcpy(outs[0].data, b.data.data(), b.data.size());
      if (!b.scales.empty()) std::memcpy(outs[1].data, b.scales.data(), b.scales.size());
    }
  }
  if (!outs.empty()) return py::make_tuple(py::none(), py::none());  // the caller's arrays hold the copy
  return py::make_tuple(numpy_bytes(std::move(b.data), d.data_shape()), numpy_bytes(std::move(b.scales), d.scale_shape()));
}

// A result in mxkit's stream-ordered device pool, for inputs from frameworks that do not allocate
// for us (torch and CuPy do: python/mxkit/__init__.py passes their tensors as outputs).
tensor_ref pool_result(std::size_t bytes, std::vector<std::int64_t> shape, dlpack::DLDataType dtype, int dev, std::uintptr_t stream) {
  tensor_ref t;
  t.pool = std::make_shared<device::pool_block>(bytes, dev, stream);
  t.owner = t.pool;
  t.data = t.pool->data();
  t.device = {dlpack::kDLCUDA, dev};
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.stream = stream;
  return t;
}

// Device quantize into mxkit's storage (any scale layout). copies: one description, or the
// rowwise and columnwise ones of one format (written in one launch). out: the 2 or 4 arrays to
// write (codes, scales per copy), or None for pool memory. Nothing here waits for the device.
// want_result false: the caller holds the outputs (quantize_device_raw), and no Python objects are
// made for them.
py::list quantize_into(const tensor_ref& x, const std::vector<copy_description>& copies, std::uintptr_t stream, std::vector<tensor_ref> refs,
                       bool want_result = true);
py::list quantize_device(const tensor_ref& x, const std::vector<copy_description>& copies, std::uintptr_t stream, py::object out) {
  std::vector<tensor_ref> refs;
  if (!out.is_none()) refs = copy_outputs(out, copies.size());
  return quantize_into(x, copies, stream, std::move(refs));
}
// The torch path's entry (mxkit/__init__.py, quantize on x's current stream): x and the outputs
// torch allocated for this call as pointers, no tensor objects made in Python, and the one or two
// descriptions as arguments of their own (no list to convert). The outputs are compact bytes of
// the descriptions' shapes on x's device (the caller made them so); the checks below are
// quantize_device's all the same.
void quantize_device_raw(std::uintptr_t x, int code, int bits, std::int64_t rows, std::int64_t cols, std::int64_t ld, int device_id,
                         const copy_description& first, const copy_description* second, std::uintptr_t stream,
                         const std::vector<std::uintptr_t>& out) {
  std::vector<copy_description> copies{first};
  if (second) copies.push_back(*second);
  const tensor_ref in = cuda_tensor(x, code, bits, {rows, cols}, {ld, 1}, device_id, py::none());
  if (out.size() != 2 * copies.size()) value_error("quantize: " + std::to_string(out.size()) + " outputs for " + std::to_string(copies.size()) + " copies");
  std::vector<tensor_ref> refs;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const copy_description& c = copies[i / 2];
    refs.push_back(cuda_tensor(out[i], dlpack::kDLUInt, 8, i % 2 == 0 ? c.data_shape() : c.scale_shape(), {}, device_id, py::none()));
  }
  (void)quantize_into(in, copies, stream, std::move(refs), false);
}
py::list quantize_into(const tensor_ref& x, const std::vector<copy_description>& copies, std::uintptr_t stream, std::vector<tensor_ref> refs,
                       bool want_result) {
  const matrix_arg m = input_matrix(x, "quantize");
  if (!x.on_cuda()) value_error("quantize: the device quantizer takes a CUDA tensor, got " + x.describe());
  if (copies.empty() || copies.size() > 2 || (copies.size() == 2 && (copies[0].layout.axis != mxkit::block_axis::rowwise ||
                                                                     copies[1].layout.axis != mxkit::block_axis::columnwise)))
    value_error("quantize: the device quantizer writes one copy, or the rowwise and the columnwise one");
  for (const copy_description& c : copies)
    if (!c.own_storage()) value_error("quantize: the device quantizer writes mxkit's storage (preset='mxkit', any scale layout), not " + c.what());
  const copy_description& d = copies.front();
  if (m.rows != d.layout.rows || m.cols != d.layout.cols) value_error("quantize: the description is for " + d.what() + " but x is " + x.describe());
  const int dev = x.device.device_id;
  const bool pooled = refs.empty();
  device::quantize_targets targets;
  targets.scales = d.storage.scales;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const copy_description& c = copies[i];
    for (int part = 0; part < 2; ++part) {
      const std::vector<std::int64_t> shape = part == 0 ? c.data_shape() : c.scale_shape();
      if (pooled) refs.push_back(pool_result(part == 0 ? c.data_bytes() : c.scale_bytes(), shape, {dlpack::kDLUInt, 8, 1}, dev, stream));
      const tensor_ref& t = refs[2 * i + static_cast<std::size_t>(part)];
      check_output(t, [&] { return "quantize: " + part_name(c, part, copies.size()); }, shape, x);
      auto* u = static_cast<std::uint8_t*>(t.data);
      const bool row = c.layout.axis == mxkit::block_axis::rowwise;
      (part == 0 ? (row ? targets.rowwise_data : targets.columnwise_data) : (row ? targets.rowwise_scales : targets.columnwise_scales)) = u;
    }
  }
  device::quantize(m.data, m.type, m.rows, m.cols, m.ld, d.layout.mx(), d.options, targets, dev, stream);
  py::list result;
  if (want_result)
    for (std::size_t i = 0; i < refs.size(); i += 2) result.append(py::make_tuple(py::cast(refs[i]), py::cast(refs[i + 1])));
  return result;
}

py::object dequantize_host(const tensor_ref& codes, const tensor_ref& scales, const copy_description& d) {
  const byte_buffer c = host_bytes(codes, "codes"), s = host_bytes(scales, "scales");
  const std::string what = d.what();
  check_size("dequantize", "codes", c.size, d.data_bytes(), what);
  check_size("dequantize", "scales", s.size, d.scale_bytes(), what);
  // Equal sizes can still be another shape's codes (a 64 x 128 copy read as 128 x 64).
  if (codes.shape.size() == 2 && codes.shape != d.data_shape())
    value_error("dequantize: codes has shape " + shape_text(codes.shape) + ", but " + what + " stores its codes as " + shape_text(d.data_shape()) +
                "; check shape, axis and fmt (an FP4 format packs two codes a byte)");
  std::vector<float> out;
  {
    py::gil_scoped_release nogil;
    const mxkit::mx_tensor t = mxkit::to_mx_tensor(d.view(c.data, s.data));
    out = mxkit::ref::dequantize(t);
  }
  return numpy_floats(std::move(out), {static_cast<std::int64_t>(d.layout.rows), static_cast<std::int64_t>(d.layout.cols)});
}

// ---- element formats ----------------------------------------------------------------------
py::object encode(const tensor_ref& x, const std::string& format, const std::string& rounding, const std::string& overflow) {
  if (!x.on_host() || x.dtype.code != dlpack::kDLFloat || x.dtype.bits != 32 || !x.compact())
    value_error("encode: x must be a contiguous float32 host array, got " + x.describe());
  const mxkit::mx_type t = parse_enum<mxkit::mx_type>(format, "fmt");
  const mxkit::rounding r = parse_enum<mxkit::rounding>(rounding, "rounding");
  if (r == mxkit::rounding::stochastic) value_error("encode: rounding='stochastic' needs random bits; use quantize with a seed");
  const mxkit::overflow o = parse_enum<mxkit::overflow>(overflow, "overflow");
  const float* in = static_cast<const float*>(x.data);
  std::vector<std::uint8_t> out(x.elements());
  mxkit::visit_mx_type(t, [&](auto fmt) {
    using E = typename decltype(fmt)::element_type;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(E::from_float(in[i], r, o).bits());
  });
  return numpy_bytes(std::move(out), x.shape);
}
std::string hex_byte(unsigned b) {
  constexpr char digits[] = "0123456789abcdef";
  return std::string("0x") + digits[(b >> 4) & 0xF] + digits[b & 0xF];
}
// A code with bits above the format's width is no code of it (FP4 0x1f is not -6): an error, not
// a mask, since such bytes are usually packed FP4 or the wrong format's codes.
py::object decode(const tensor_ref& codes, const std::string& format) {
  const byte_buffer c = host_bytes(codes, "codes");
  const mxkit::mx_type t = parse_enum<mxkit::mx_type>(format, "fmt");
  std::vector<float> out(c.size);
  mxkit::visit_mx_type(t, [&](auto fmt) {
    using E = typename decltype(fmt)::element_type;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if constexpr (E::bits_count < 8) {
        if (c.data[i] >> E::bits_count)
          value_error("decode: codes holds " + hex_byte(c.data[i]) + " at flat index " + std::to_string(i) + ", which is not a " + mxkit::name_of(t) +
                      " code (" + std::to_string(E::bits_count) + " bits: 0x00 to " + hex_byte((1u << E::bits_count) - 1) + ")" +
                      (t == mxkit::mx_type::mxfp4 ? "; unpack packed FP4 bytes with unpack_fp4 first" : ""));
      }
      out[i] = E::from_bits(static_cast<typename E::storage_type>(c.data[i])).to_float();
    }
  });
  return numpy_floats(std::move(out), codes.shape);
}

// FP4 packing through the library's own byte rule (block/pack.hpp: element 2i in the low
// nibble); high_first swaps the two.
py::object pack_fp4(const tensor_ref& codes, const std::string& nibbles) {
  const byte_buffer c = host_bytes(codes, "codes");
  const mxkit::nibble_order order = parse_enum<mxkit::nibble_order>(nibbles, "nibbles");
  if (codes.shape.empty()) value_error("pack_fp4: codes must have at least one axis, got a scalar");
  if (codes.shape.back() % 2) value_error("pack_fp4: the last axis of codes has " + std::to_string(codes.shape.back()) + " codes, not an even number");
  std::vector<std::uint8_t> out(c.size / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint8_t first = c.data[2 * i], second = c.data[2 * i + 1];
    for (std::size_t k : {2 * i, 2 * i + 1})
      if (c.data[k] > 0xF)
        value_error("pack_fp4: codes holds " + hex_byte(c.data[k]) + " at flat index " + std::to_string(k) + ", which is not an FP4 code (0x00 to 0x0f)");
    if (order == mxkit::nibble_order::high_first) std::swap(first, second);
    out[i] = mxkit::pack_fp4x2(first, second);
  }
  std::vector<std::int64_t> shape = codes.shape;
  shape.back() /= 2;
  return numpy_bytes(std::move(out), std::move(shape));
}
py::object unpack_fp4(const tensor_ref& packed, const std::string& nibbles) {
  const byte_buffer p = host_bytes(packed, "packed");
  const mxkit::nibble_order order = parse_enum<mxkit::nibble_order>(nibbles, "nibbles");
  if (packed.shape.empty()) value_error("unpack_fp4: packed must have at least one axis, got a scalar");
  std::vector<std::uint8_t> out(2 * p.size);
  const std::size_t swap = order == mxkit::nibble_order::high_first ? 1 : 0;
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = mxkit::load_code(p.data, i ^ swap, 4);
  std::vector<std::int64_t> shape = packed.shape;
  shape.back() *= 2;
  return numpy_bytes(std::move(out), std::move(shape));
}

// ---- validation ---------------------------------------------------------------------------
struct validation_result {
  mxkit::ref::mx_validation_report report;
  std::string text;
  bool diagnosed = false;
  std::string diagnosis;        // explanation, when diagnosed
  std::string passing_change;   // the change that passes, or empty
  std::vector<std::pair<std::string, std::size_t>> tried;  // (change, mismatches)
};

float decoded(mxkit::mx_type type, std::uint8_t code, std::uint8_t scale) {
  return mxkit::visit_mx_type(type, [&](auto fmt) {
    using E = typename decltype(fmt)::element_type;
    return mxkit::dequantize_element_value(E::from_bits(code).to_float(), mxkit::e8m0::from_bits(scale));
  });
}
float scale_value(std::uint8_t s) { return mxkit::e8m0::from_bits(s).to_float(); }

// A validation report's mismatches as columns of NumPy arrays, one per field; kind_of(m) names
// a mismatch's kind and values_of(m) gives its expected and actual decoded values (what a
// consumer of either copy would compute). MX and NVFP4 reports share every other column.
template <class Mismatch, class KindOf, class ValuesOf>
py::dict mismatch_columns(const std::vector<Mismatch>& ms, const char* kind_dtype, KindOf kind_of, ValuesOf values_of) {
  const std::size_t n = ms.size();
  std::vector<std::int64_t> row(n), col(n), line(n), block(n), index(n);
  std::vector<std::uint8_t> expected(n), actual(n), scale(n), actual_scale(n);
  std::vector<float> expected_value(n), actual_value(n), input(n), value(n);
  std::vector<std::string> kind(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Mismatch& m = ms[i];
    kind[i] = kind_of(m);
    row[i] = static_cast<std::int64_t>(m.row);
    col[i] = static_cast<std::int64_t>(m.col);
    line[i] = static_cast<std::int64_t>(m.line);
    block[i] = static_cast<std::int64_t>(m.block);
    index[i] = static_cast<std::int64_t>(m.index);
    expected[i] = m.expected;
    actual[i] = m.actual;
    scale[i] = m.scale;
    actual_scale[i] = m.actual_scale;
    input[i] = m.input;
    value[i] = m.value;
    const std::pair<float, float> v = values_of(m);
    expected_value[i] = v.first;
    actual_value[i] = v.second;
  }
  py::dict d;
  d["kind"] = numpy_list(kind, kind_dtype);
  d["row"] = numpy_list(row, "int64");
  d["column"] = numpy_list(col, "int64");
  d["line"] = numpy_list(line, "int64");
  d["block"] = numpy_list(block, "int64");
  d["index"] = numpy_list(index, "int64");
  d["expected"] = numpy_list(expected, "uint8");
  d["actual"] = numpy_list(actual, "uint8");
  d["expected_value"] = numpy_list(expected_value, "float32");
  d["actual_value"] = numpy_list(actual_value, "float32");
  d["scale"] = numpy_list(scale, "uint8");
  d["actual_scale"] = numpy_list(actual_scale, "uint8");
  d["input"] = numpy_list(input, "float32");
  d["value"] = numpy_list(value, "float32");
  return d;
}

py::dict mismatch_arrays(const mxkit::ref::mx_validation_report& r) {
  // A scale mismatch: the two scales' values; an element: the two element values times their
  // blocks' scales.
  return mismatch_columns(r.mismatches, "U7", [](const mxkit::ref::mx_mismatch& m) { return std::string(mxkit::name_of(m.kind())); },
                          [](const mxkit::ref::mx_mismatch& m) {
                            return m.is_scale ? std::pair(scale_value(m.expected), scale_value(m.actual))
                                              : std::pair(decoded(m.type, m.expected, m.scale), decoded(m.type, m.actual, m.actual_scale));
                          });
}

validation_result validate_host(const tensor_ref& x, const tensor_ref& codes, const tensor_ref& scales, const copy_description& d,
                                std::size_t max_reported, bool strict_nan_blocks, bool check_padding, bool diagnose, unsigned threads) {
  const matrix_arg m = input_matrix(x, "validate");
  if (!x.on_host()) value_error("validate: x is " + x.describe() + "; validation reads host memory");
  if (m.rows != d.layout.rows || m.cols != d.layout.cols) value_error("validate: the description is for " + d.what() + " but x is " + x.describe());
  const byte_buffer c = host_bytes(codes, "codes"), s = host_bytes(scales, "scales");
  check_size("validate", "codes", c.size, d.data_bytes(), d.what());
  check_size("validate", "scales", s.size, d.scale_bytes(), d.what(), size_rule::at_least);
  mxkit::ref::validate_options o;
  o.max_reported = max_reported;
  o.strict_nan_blocks = strict_nan_blocks;
  o.check_padding = check_padding;
  o.quirks = d.quirks;
  o.threads = threads;
  validation_result v;
  py::gil_scoped_release nogil;
  with_host_matrix(m, [&](auto in) {
    v.report = mxkit::ref::validate(in, d.view(c, s), o);
    if (!v.report.ok() && diagnose) {
      const mxkit::ref::layout_diagnosis dg = mxkit::ref::diagnose_layout(in, d.view(c, s), o);
      v.diagnosed = true;
      v.diagnosis = dg.explanation;
      if (const mxkit::ref::layout_candidate* p = dg.passing()) v.passing_change = p->change;
      for (const mxkit::ref::layout_candidate& t : dg.tried) v.tried.emplace_back(t.change, t.mismatches);
    }
  });
  v.text = mxkit::ref::to_string(v.report);
  if (v.diagnosed) v.text += "\n  diagnosis: " + v.diagnosis;
  return v;
}

struct gemm_result {
  mxkit::ref::gemm_validation_report report;
  std::string text;
};

gemm_result validate_gemm_host(const tensor_ref& a_codes, const tensor_ref& a_scales, const copy_description& a, const tensor_ref& b_codes,
                               const tensor_ref& b_scales, const copy_description& b, const tensor_ref& d, float alpha, std::size_t sample_rows,
                               std::vector<std::size_t> rows, const std::string& accumulation, double relative, double absolute,
                               std::size_t max_reported, unsigned threads) {
  const byte_buffer ac = host_bytes(a_codes, "a_codes"), as = host_bytes(a_scales, "a_scales");
  const byte_buffer bc = host_bytes(b_codes, "b_codes"), bs = host_bytes(b_scales, "b_scales");
  check_size("validate_gemm", "a_codes", ac.size, a.data_bytes(), a.what());
  check_size("validate_gemm", "a_scales", as.size, a.scale_bytes(), a.what());
  check_size("validate_gemm", "b_codes", bc.size, b.data_bytes(), b.what());
  check_size("validate_gemm", "b_scales", bs.size, b.scale_bytes(), b.what());
  if (!d.on_host() || d.shape.size() != 2) value_error("validate_gemm: d must be a 2-D host array, got " + d.describe());
  if (static_cast<std::size_t>(d.shape[0]) != a.layout.rows || static_cast<std::size_t>(d.shape[1]) != b.layout.rows)
    value_error("validate_gemm: d has shape " + shape_text(d.shape) + ", but A has " + std::to_string(a.layout.rows) + " rows and B " +
                std::to_string(b.layout.rows));
  const matrix_arg dm = input_matrix(d, "validate_gemm", "d");
  mxkit::ref::gemm_validate_options o;
  o.alpha = alpha;
  o.sample_rows = sample_rows;
  o.rows = std::move(rows);
  o.accumulation = accumulation == "fp32" ? mxkit::ref::gemm_accumulation::fp32
                   : accumulation == "tensor_core" ? mxkit::ref::gemm_accumulation::tensor_core
                                                   : (value_error("accumulation '" + accumulation + "' is not fp32 or tensor_core"), mxkit::ref::gemm_accumulation::fp32);
  o.relative = relative;
  o.absolute = absolute;
  o.max_reported = max_reported;
  o.threads = threads;
  gemm_result g;
  py::gil_scoped_release nogil;
  const auto av = a.view(ac.data, as.data), bv = b.view(bc.data, bs.data);
  if (dm.type == device::input_type::f32) g.report = mxkit::ref::validate_gemm(av, bv, mxkit::matrix_view<const float>{static_cast<const float*>(dm.data), dm.rows, dm.cols, dm.ld}, o);
  else if (dm.type == device::input_type::bf16) g.report = mxkit::ref::validate_gemm(av, bv, mxkit::matrix_view<const mxkit::bfloat16>{static_cast<const mxkit::bfloat16*>(dm.data), dm.rows, dm.cols, dm.ld}, o);
  else value_error("validate_gemm: d must be float32 or bfloat16, got " + d.describe());
  g.text = mxkit::ref::to_string(g.report);
  return g;
}

tensor_ref gemm_device(const tensor_ref& a_codes, const tensor_ref& a_scales, const copy_description& a, const tensor_ref& b_codes,
                       const tensor_ref& b_scales, const copy_description& b, bool bf16_output, float alpha, std::uintptr_t stream,
                       std::optional<tensor_ref> out) {
  const std::pair<const tensor_ref*, const char*> operands[] = {{&a_codes, "a_codes"}, {&a_scales, "a_scales"}, {&b_codes, "b_codes"}, {&b_scales, "b_scales"}};
  for (const auto& [t, name] : operands) {
    if (!t->on_cuda() || !byte_dtype(*t) || !t->compact())
      value_error(std::string("gemm: ") + name + " must be a contiguous byte tensor on a CUDA device, got " + t->describe());
    if (!same_device(*t, a_codes)) value_error(std::string("gemm: ") + name + " is " + t->describe() + ", but a_codes is " + a_codes.describe());
  }
  if (!a.own_storage() || !b.own_storage() || a.storage.scales != mxkit::scale_layout::row_major || b.storage.scales != mxkit::scale_layout::row_major)
    value_error("gemm: the device GEMM reads mxkit's storage with row_major scales (quantize(..., scale_layout='row_major'))");
  check_size("gemm", "a_codes", a_codes.nbytes(), a.data_bytes(), a.what());
  check_size("gemm", "a_scales", a_scales.nbytes(), a.scale_bytes(), a.what());
  check_size("gemm", "b_codes", b_codes.nbytes(), b.data_bytes(), b.what());
  check_size("gemm", "b_scales", b_scales.nbytes(), b.scale_bytes(), b.what());
  const int dev = a_codes.device.device_id;
  const std::size_t p = a.layout.rows, q = b.layout.rows;
  const dlpack::DLDataType dtype = bf16_output ? dlpack::DLDataType{dlpack::kDLBfloat, 16, 1} : dlpack::DLDataType{dlpack::kDLFloat, 32, 1};
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(p), static_cast<std::int64_t>(q)};
  tensor_ref d = out ? *out : pool_result(p * q * (bf16_output ? 2 : 4), shape, dtype, dev, stream);
  check_output(d, "gemm: out", shape, a_codes, dtype);
  const mxkit::mx_const_view av{a.layout, a.options, static_cast<const std::uint8_t*>(a_codes.data), static_cast<const std::uint8_t*>(a_scales.data)};
  const mxkit::mx_const_view bv{b.layout, b.options, static_cast<const std::uint8_t*>(b_codes.data), static_cast<const std::uint8_t*>(b_scales.data)};
  device::gemm(av, bv, d.data, bf16_output, q, alpha, dev, stream);
  return d;
}

// ---- MXFP8 copies held as bf16 values: mxkit.torch.Linear's MXFP8 route on a CUDA device ------
// (python/mxkit/linear.py). The quantizer writes each element as its bf16 value, code x block
// scale (gpu::quantize_outputs::values_as_bf16), which Hopper's GEMM multiplies without expanding
// codes first. The layer asks this for the rowwise copies it multiplies at once (X and W in
// forward, dY in backward: a rowwise copy alone takes the row-streaming kernel); the columnwise
// copies it keeps for backward stay codes, a byte an element.
constexpr dlpack::DLDataType bf16_type{dlpack::kDLBfloat, 16, 1}, int32_type{dlpack::kDLInt, 32, 1};

// x: a bfloat16 or float16 CUDA matrix; c: its rowwise MXFP8 description (mxkit's storage,
// row-major scales, no rotation); out: the values [rows, padded length] bf16, the scales, then the
// flag (one int32), all on x's device.
void mxfp8_values_quantize_device(const tensor_ref& x, const copy_description& c, std::uintptr_t stream, const std::vector<tensor_ref>& out) {
  const char* f = "mxfp8_values_quantize_device";
  const matrix_arg m = input_matrix(x, f);
  if (!x.on_cuda() || m.type == device::input_type::f32) value_error(std::string(f) + ": x must be a bfloat16 or float16 CUDA tensor, got " + x.describe());
  const mxkit::mx_type t = c.layout.mx();
  if (!c.own_storage() || c.storage.scales != mxkit::scale_layout::row_major || c.options.hadamard || c.layout.axis != mxkit::block_axis::rowwise ||
      (t != mxkit::mx_type::mxfp8_e4m3 && t != mxkit::mx_type::mxfp8_e5m2))
    value_error(std::string(f) + ": a rowwise MXFP8 copy in mxkit's storage with row_major scales and no rotation, not " + c.what());
  if (c.layout.rows != m.rows || c.layout.cols != m.cols) value_error(std::string(f) + ": the description is for " + c.what() + " but x is " + x.describe());
  if (out.size() != 3) value_error(std::string(f) + ": out holds " + std::to_string(out.size()) + " arrays; this call writes 3");
  check_output(out[0], std::string(f) + ": values",
               {static_cast<std::int64_t>(c.layout.lines()), static_cast<std::int64_t>(c.layout.padded_length())}, x, bf16_type);
  check_output(out[1], std::string(f) + ": scales", c.scale_shape(), x);
  check_output(out[2], std::string(f) + ": flag", {1}, x, int32_type);
  device::quantize_targets targets;
  targets.rowwise_data = static_cast<std::uint8_t*>(out[0].data);
  targets.rowwise_scales = static_cast<std::uint8_t*>(out[1].data);
  targets.beyond_exact_range = static_cast<int*>(out[2].data);
  device::quantize(m.data, m.type, m.rows, m.cols, m.ld, t, c.options, targets, x.device.device_id, stream);
}

// D = alpha * A . B^T into out (float32 or bf16 [P, Q], on the operands' device), each side an
// MXFP8 copy of codes or of bf16 values (flag given), described as [lines, length] rowwise.
void gemm_sides_device(const tensor_ref& a_data, const tensor_ref& a_scales, const copy_description& a, std::optional<tensor_ref> a_flag,
                       const tensor_ref& b_data, const tensor_ref& b_scales, const copy_description& b, std::optional<tensor_ref> b_flag,
                       float alpha, std::uintptr_t stream, const tensor_ref& out) {
  const char* f = "gemm_sides_device";
  auto side = [&](const tensor_ref& data, const tensor_ref& scales, const copy_description& d, const std::optional<tensor_ref>& flag,
                  const char* name) {
    if (!d.own_storage() || d.storage.scales != mxkit::scale_layout::row_major || d.layout.axis != mxkit::block_axis::rowwise)
      value_error(std::string(f) + ": " + name + " must be described as a rowwise copy in mxkit's storage with row_major scales, not " + d.what());
    if (flag) {
      check_output(data, std::string(f) + ": " + name + " values",
                   {static_cast<std::int64_t>(d.layout.lines()), static_cast<std::int64_t>(d.layout.padded_length())}, out, bf16_type);
      check_output(*flag, std::string(f) + ": " + name + " flag", {1}, out, int32_type);
    } else {
      check_output(data, std::string(f) + ": " + name + " codes", d.data_shape(), out);
    }
    check_output(scales, std::string(f) + ": " + name + " scales", d.scale_shape(), out);
    const mxkit::mx_const_view v{d.layout, d.options, static_cast<const std::uint8_t*>(data.data), static_cast<const std::uint8_t*>(scales.data)};
    return device::gemm_side{v, flag ? static_cast<const int*>(flag->data) : nullptr};
  };
  const device::gemm_side sa = side(a_data, a_scales, a, a_flag, "a"), sb = side(b_data, b_scales, b, b_flag, "b");
  const bool bf16 = out.dtype.code == dlpack::kDLBfloat;
  check_output(out, std::string(f) + ": out", {static_cast<std::int64_t>(a.layout.lines()), static_cast<std::int64_t>(b.layout.lines())}, out,
               bf16 ? bf16_type : dlpack::DLDataType{dlpack::kDLFloat, 32, 1});
  if (!out.on_cuda()) value_error(std::string(f) + ": out must be a CUDA tensor, got " + out.describe());
  device::gemm_sides(sa, sb, out.data, bf16, b.layout.lines(), alpha, out.device.device_id, stream);
}

// ---- training: what mxkit.torch.Linear runs (python/mxkit/linear.py) -------------------------
// The recipes by name, each of nn/recipe.hpp's presets as the Python layer reads it: per GEMM
// (fprop, dgrad, wgrad) the two operands' precision, MX format, scale rule, rounding and FP8
// type, the Hadamard rotation, random signs and Philox key; the delayed-scaling settings.
// Every key for every kind (python/mxkit/linear.py reads them all): the parts another kind has
// read as that kind's defaults.
py::dict operand_dict(const mxkit::nn::operand_spec& o) {
  const mxkit::nn::block_scaled_spec b = o.is<mxkit::nn::block_scaled_spec>() ? o.block_scaled() : mxkit::nn::block_scaled_spec{};
  const mxkit::nn::fp8_spec f = o.is<mxkit::nn::fp8_spec>() ? o.fp8() : mxkit::nn::fp8_spec{};
  py::dict d;
  d["kind"] = std::string(mxkit::name_of(o.kind()));
  d["format"] = std::string(b.format_name());
  d["rule"] = std::string(mxkit::name_of(b.rule));
  d["rounding"] = std::string(mxkit::name_of(b.round));
  d["fp8"] = std::string(mxkit::name_of(f.type));
  return d;
}
py::dict recipe_spec(const std::string& name) {
  const mxkit::nn::recipe r = recipe_by_name(name, {});
  py::dict d;
  d["name"] = name;
  d["title"] = r.name;
  for (mxkit::gemm_product g : {mxkit::gemm_product::fprop, mxkit::gemm_product::dgrad, mxkit::gemm_product::wgrad}) {
    const mxkit::nn::gemm_spec& s = r.gemm(g);
    py::dict gd;
    gd["a"] = operand_dict(s.a);
    gd["b"] = operand_dict(s.b);
    gd["hadamard"] = s.hadamard;
    gd["random_signs"] = s.random_signs;
    gd["seed"] = s.seed;
    d[mxkit::name_of(g)] = gd;
  }
  py::dict sc;
  sc["history_length"] = r.scaling.history_length;
  sc["algorithm"] = std::string(mxkit::name_of(r.scaling.algorithm));
  sc["margin"] = r.scaling.margin;
  d["scaling"] = sc;
  py::dict fmax;  // the delayed-scaling numerator of each FP8 type (tensor/fp8_tensor.hpp)
  for (mxkit::fp8_type t : {mxkit::fp8_type::e4m3, mxkit::fp8_type::e5m2}) fmax[mxkit::name_of(t)] = mxkit::fp8_max(t);
  d["fp8_max"] = fmax;
  return d;
}

mxkit::nn::delayed_scaling_config scaling_config(std::size_t history_length, const std::string& algorithm, int margin) {
  mxkit::nn::delayed_scaling_config c;
  c.history_length = history_length;
  c.algorithm = parse_enum<mxkit::nn::amax_algorithm>(algorithm, "algorithm");
  c.margin = margin;
  mxkit::nn::check_config(c);
  return c;
}
mxkit::nn::dtype storage_dtype(const std::string& name, const char* what) {
  const mxkit::nn::dtype t = parse_enum<mxkit::nn::dtype>(name, what);
  if (t != mxkit::nn::dtype::f32 && t != mxkit::nn::dtype::bf16) value_error(std::string("linear_steps: ") + what + " must be f32 or bf16, got " + name);
  return t;
}
// A [steps, rows, cols] float32 host array's values.
std::vector<float> step_values(const tensor_ref& t, const char* name, std::size_t steps, std::size_t rows, std::size_t cols) {
  if (!t.on_host() || t.dtype.code != dlpack::kDLFloat || t.dtype.bits != 32 || !t.compact() || t.shape.size() != 3)
    value_error(std::string("linear_steps: ") + name + " must be a contiguous float32 host array [steps, rows, cols], got " + t.describe());
  const std::vector<std::int64_t> want{static_cast<std::int64_t>(steps), static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)};
  if (t.shape != want) value_error(std::string("linear_steps: ") + name + " has shape " + shape_text(t.shape) + ", expected " + shape_text(want));
  const float* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.elements());
}
// mxkit's C++ linear for x.shape[0] training steps (linear_run.hpp): the Python tests' oracle.
py::dict linear_steps(const std::string& recipe, const tensor_ref& x, const tensor_ref& w, const tensor_ref& dy, bool on_device,
                      const std::string& activations, const std::string& weight, std::size_t history_length, const std::string& algorithm,
                      int margin, std::uint32_t layer_id) {
  if (x.shape.size() != 3 || w.shape.size() != 3 || dy.shape.size() != 3)
    value_error("linear_steps: x, w and dy must be [steps, M, K], [steps, N, K] and [steps, M, N]");
  linear_step_args a;
  a.recipe = recipe;
  a.layer_id = layer_id;
  a.scaling = scaling_config(history_length, algorithm, margin);
  a.steps = static_cast<std::size_t>(x.shape[0]);
  a.m = static_cast<std::size_t>(x.shape[1]);
  a.k = static_cast<std::size_t>(x.shape[2]);
  a.n = static_cast<std::size_t>(w.shape[1]);
  a.x = step_values(x, "x", a.steps, a.m, a.k);
  a.w = step_values(w, "w", a.steps, a.n, a.k);
  a.dy = step_values(dy, "dy", a.steps, a.m, a.n);
  a.activations = storage_dtype(activations, "activations");
  a.weight = storage_dtype(weight, "weight");
  (void)recipe_by_name(recipe, a.scaling);  // an unknown name: ValueError before any work
  linear_step_result r;
  {
    py::gil_scoped_release nogil;
    if (on_device) {
      r = device::linear_steps(a);
    } else {
      mxkit::ref::host_backend be;
      r = run_linear_steps(be, a);
    }
  }
  const auto s = static_cast<std::int64_t>(a.steps), m = static_cast<std::int64_t>(a.m), k = static_cast<std::int64_t>(a.k),
             n = static_cast<std::int64_t>(a.n);
  py::dict d;
  d["y"] = numpy_floats(std::move(r.y), {s, m, n});
  d["dx"] = numpy_floats(std::move(r.dx), {s, m, k});
  d["dw"] = numpy_floats(std::move(r.dw), {s, n, k});
  if (!r.scale.empty()) {
    const auto rows = static_cast<std::int64_t>(r.scale.size());
    d["scale"] = numpy_floats(std::move(r.scale), {rows});
    d["amax_history"] = numpy_floats(std::move(r.history), {rows, static_cast<std::int64_t>(history_length)});
  }
  return d;
}

// One float32 cell (a scale, an amax slot) or a float32 vector of `n` cells, on `like`'s device.
float* float_cells(const tensor_ref& t, const std::string& what, const tensor_ref& like, std::size_t n = 1) {
  if (t.dtype.code != dlpack::kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1 || t.elements() != n || !t.compact())
    value_error(what + " must be " + std::to_string(n) + " contiguous float32 value" + (n == 1 ? "" : "s") + ", got " + t.describe());
  if (!same_device(t, like)) value_error(what + " is " + t.describe() + ", but the operands are " + like.describe());
  if (t.read_only) value_error(what + " is read-only");
  return static_cast<float*>(t.data);
}
// FP8 codes [rows, cols] on `like`'s device.
std::uint8_t* fp8_codes(const tensor_ref& t, const std::string& what, const tensor_ref& like, std::size_t rows, std::size_t cols) {
  check_output(t, what, {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)}, like);
  return static_cast<std::uint8_t*>(t.data);
}

// The delayed-scaling FP8 cast of x: code = cast(x * scale), saturating (fp8_encode); the amax
// max-combined into history (NaN wins: nn::record_amax) when given; codes and/or their transpose;
// the scale used written to data_scale / transposed_scale. Host: quantize_fp8; CUDA:
// gpu::cast_fp8_delayed on `stream` (the scale read on the device: nothing waits).
void fp8_cast(const tensor_ref& x, const std::string& format, const tensor_ref& scale, std::optional<tensor_ref> history,
              std::optional<tensor_ref> codes, std::optional<tensor_ref> transposed, std::optional<tensor_ref> data_scale,
              std::optional<tensor_ref> transposed_scale, std::uintptr_t stream) {
  const matrix_arg m = input_matrix(x, "fp8_cast");
  const mxkit::fp8_type t = parse_enum<mxkit::fp8_type>(format, "fp8");
  if (!codes && !transposed) value_error("fp8_cast: give codes, transposed or both");
  float* s = float_cells(scale, "fp8_cast: scale", x);
  float* h = history ? float_cells(*history, "fp8_cast: history", x) : nullptr;
  std::uint8_t* c = codes ? fp8_codes(*codes, "fp8_cast: codes", x, m.rows, m.cols) : nullptr;
  std::uint8_t* ct = transposed ? fp8_codes(*transposed, "fp8_cast: transposed", x, m.cols, m.rows) : nullptr;
  float* ds = data_scale ? float_cells(*data_scale, "fp8_cast: data_scale", x) : nullptr;
  float* ts = transposed_scale ? float_cells(*transposed_scale, "fp8_cast: transposed_scale", x) : nullptr;
  if (x.on_cuda()) {
    device::fp8_cast(m.data, m.type, m.rows, m.cols, m.ld, t, s, h, {c, ct, ds, ts}, x.device.device_id, stream);
    return;
  }
  if (!x.on_host()) value_error("fp8_cast: x is " + x.describe() + "; mxkit reads host or CUDA memory");
  py::gil_scoped_release nogil;
  const mxkit::fp8_tensor f = with_host_matrix(m, [&](auto in) { return mxkit::quantize_fp8(in, t, *s); });
  if (h) mxkit::nn::record_amax(*h, f.amax);
  if (c && !f.data.empty()) std::memcpy(c, f.data.data(), f.data.size());
  if (ct) {
    const mxkit::fp8_tensor tr = mxkit::transpose(f);
    if (!tr.data.empty()) std::memcpy(ct, tr.data.data(), tr.data.size());
  }
  if (ds) *ds = f.scale;
  if (ts) *ts = f.scale;
}

// D[P,Q] = A[P,R] . B[Q,R]^T / (a_scale * b_scale) on per-tensor FP8 codes. Host: ref::gemm (the
// reference's order; out float32, rounded to bf16 values when bf16); CUDA: the device backend's
// FP8 GEMM (out float32 or bfloat16), the descales read on the device.
void fp8_gemm(const tensor_ref& a, const std::string& a_format, const tensor_ref& a_scale, const tensor_ref& b,
              const std::string& b_format, const tensor_ref& b_scale, const tensor_ref& out, bool bf16, std::uintptr_t stream) {
  const mxkit::fp8_type ta = parse_enum<mxkit::fp8_type>(a_format, "a_fp8"), tb = parse_enum<mxkit::fp8_type>(b_format, "b_fp8");
  if (a.shape.size() != 2 || b.shape.size() != 2 || a.shape[1] != b.shape[1])
    value_error("fp8_gemm: a and b must be [P, R] and [Q, R] codes, got " + a.describe() + " and " + b.describe());
  const auto p = static_cast<std::size_t>(a.shape[0]), q = static_cast<std::size_t>(b.shape[0]), r = static_cast<std::size_t>(a.shape[1]);
  const std::uint8_t* ac = fp8_codes(a, "fp8_gemm: a", a, p, r);
  const std::uint8_t* bc = fp8_codes(b, "fp8_gemm: b", a, q, r);
  const float* as = float_cells(a_scale, "fp8_gemm: a_scale", a);
  const float* bs = float_cells(b_scale, "fp8_gemm: b_scale", a);
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(p), static_cast<std::int64_t>(q)};
  const bool out_bf16 = out.dtype.code == dlpack::kDLBfloat && out.dtype.bits == 16;
  check_output(out, "fp8_gemm: out", shape, a, out_bf16 ? dlpack::DLDataType{dlpack::kDLBfloat, 16, 1} : dlpack::DLDataType{dlpack::kDLFloat, 32, 1});
  if (out_bf16 && !bf16) value_error("fp8_gemm: a bfloat16 out needs bf16=True");
  if (a.on_cuda()) {
    device::fp8_gemm(ac, ta, as, bc, tb, bs, p, q, r, out.data, bf16, a.device.device_id, stream);
    return;
  }
  if (out_bf16) value_error("fp8_gemm: a host out is float32 (bf16=True rounds its values)");
  py::gil_scoped_release nogil;
  const mxkit::fp8_view va{ta, p, r, *as, ac}, vb{tb, q, r, *bs, bc};
  float* d = static_cast<float*>(out.data);
  if (!bf16) {
    mxkit::ref::gemm(va, vb, mxkit::matrix_view<float>{d, p, q});
    return;
  }
  std::vector<mxkit::bfloat16> tmp(p * q);
  mxkit::ref::gemm(va, vb, mxkit::matrix_view<mxkit::bfloat16>{tmp.data(), p, q});
  for (std::size_t i = 0; i < tmp.size(); ++i) d[i] = tmp[i].to_float();
}

// D[P,Q] = A[P,K] . B[Q,K]^T from two host MX copies (ref::gemm: each block's dot product exact,
// scaled, rounded to float and added in block order), into a float32 out, rounded to bf16
// values when bf16: the host backend's GEMM, which mxkit.gemm (device only) has no host form of.
void gemm_host(const tensor_ref& a_codes, const tensor_ref& a_scales, const copy_description& a, const tensor_ref& b_codes,
               const tensor_ref& b_scales, const copy_description& b, const tensor_ref& out, bool bf16) {
  const byte_buffer ac = host_bytes(a_codes, "a_codes"), as = host_bytes(a_scales, "a_scales");
  const byte_buffer bc = host_bytes(b_codes, "b_codes"), bs = host_bytes(b_scales, "b_scales");
  check_size("gemm_host", "a_codes", ac.size, a.data_bytes(), a.what());
  check_size("gemm_host", "a_scales", as.size, a.scale_bytes(), a.what());
  check_size("gemm_host", "b_codes", bc.size, b.data_bytes(), b.what());
  check_size("gemm_host", "b_scales", bs.size, b.scale_bytes(), b.what());
  if (!a.own_storage() || !b.own_storage() || a.storage.scales != mxkit::scale_layout::row_major || b.storage.scales != mxkit::scale_layout::row_major)
    value_error("gemm_host: the operands must be in mxkit's storage with row_major scales");
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(a.layout.lines()), static_cast<std::int64_t>(b.layout.lines())};
  check_output(out, "gemm_host: out", shape, a_codes, {dlpack::kDLFloat, 32, 1});
  const mxkit::mx_const_view av{a.layout, a.options, ac.data, as.data}, bv{b.layout, b.options, bc.data, bs.data};
  const auto p = static_cast<std::size_t>(shape[0]), q = static_cast<std::size_t>(shape[1]);
  float* d = static_cast<float*>(out.data);
  py::gil_scoped_release nogil;
  if (!bf16) {
    mxkit::ref::gemm(av, bv, mxkit::matrix_view<float>{d, p, q});
    return;
  }
  std::vector<mxkit::bfloat16> tmp(p * q);
  mxkit::ref::gemm(av, bv, mxkit::matrix_view<mxkit::bfloat16>{tmp.data(), p, q});
  for (std::size_t i = 0; i < tmp.size(); ++i) d[i] = tmp[i].to_float();
}

// The delayed-scaling update of a scaling table (nn/delayed_scaling_rule.hpp): history [rows, H],
// scale and fp8_max [rows], float32, all on one device. Host: ref::update_scales; CUDA:
// gpu::update_scales on `stream`.
void update_scales(const tensor_ref& history, const tensor_ref& scale, const tensor_ref& fp8_max, const std::string& algorithm, int margin,
                   std::uintptr_t stream) {
  if (history.shape.size() != 2) value_error("update_scales: history must be [rows, H], got " + history.describe());
  const auto rows = static_cast<std::size_t>(history.shape[0]), h = static_cast<std::size_t>(history.shape[1]);
  const mxkit::nn::delayed_scaling_config c = scaling_config(h, algorithm, margin);
  float* hp = float_cells(history, "update_scales: history", history, rows * h);
  float* sp = float_cells(scale, "update_scales: scale", history, rows);
  const float* mp = float_cells(fp8_max, "update_scales: fp8_max", history, rows);
  if (history.on_cuda()) {
    device::update_scales(hp, sp, mp, rows, h, c, history.device.device_id, stream);
    return;
  }
  mxkit::ref::update_scales(hp, sp, mp, rows, h, c);
}

// ---- NVFP4 on the host ----------------------------------------------------------------------
// NVFP4 copies (issue 46, section 2) from Python: the host reference quantizer and dequantizer
// (ref/nvfp4_quantize.hpp), validation with the TransformerEngine and torchao presets
// (validation/nvfp4_presets.hpp) and the layout diagnosis. A description of its own, beside the
// MX one, because an NVFP4 copy has what an MX copy has not: a block shape (1 x 16 or 16 x 16),
// a formula (whose order of fp32 operations), and a tensor scale whose meaning is the formula's
// (mxkit and torchao store the decode scale, TransformerEngine the copy's amax). The tensor scale
// travels beside the codes and scales (python/mxkit/__init__.py, NVFP4Copy), never in the
// description: one description serves a copy whatever scale it was quantized under. The device
// quantizer and GEMM take mxkit's copies: the next section.
struct nvfp4_description {
  std::string preset = "mxkit";
  std::string name = "mxkit";
  mxkit::block_layout layout;
  mxkit::nvfp4_options options;
  mxkit::mx_storage storage;
  mxkit::ref::nvfp4_quirks quirks;
  std::optional<mxkit::ref::nvfp4_preset> peer;
  bool tensor_scale_from_amax = true;  // false: the tensor scale was given (validate takes it as it is)

  mxkit::nvfp4_foreign_view view(std::span<const std::uint8_t> data = {}, std::span<const std::uint8_t> scales = {}, float tensor_scale = 1.0f) const {
    return {layout, options, storage, data, scales, tensor_scale, tensor_scale_from_amax};
  }
  std::size_t data_bytes() const { return view().data_span(); }
  std::size_t scale_bytes() const { return view().scale_span(); }
  std::vector<std::int64_t> data_shape() const {
    const auto v = view();
    return {static_cast<std::int64_t>(v.stored_rows()), static_cast<std::int64_t>(v.data_ld())};
  }
  std::vector<std::int64_t> scale_shape() const {  // [lines, blocks] (TE: its padded allocation), or a tiled layout's flat buffer
    const auto v = view();
    const mxkit::scale_extent e = v.stored_scale_extent();
    if (storage.scales != mxkit::scale_layout::row_major) return {static_cast<std::int64_t>(e.size())};
    return {static_cast<std::int64_t>(e.lines), static_cast<std::int64_t>(e.blocks)};
  }
  std::string block() const { return layout.tile_lines() == 1 ? "1x16" : "16x16"; }
  std::string what() const {  // "a rowwise nvfp4 (1x16) 128x64 copy with cublas_128x4 scales (NVIDIA TE NVFP4 (1 x 16 blocks))"
    std::ostringstream s;
    s << "a " << mxkit::name_of(layout.axis) << " nvfp4 (" << block() << ") " << layout.rows << "x" << layout.cols << " copy";
    if (storage.scales != mxkit::scale_layout::row_major) s << " with " << mxkit::name_of(storage.scales) << " scales";
    s << " (" << name << ")";
    return s.str();
  }
};

nvfp4_description describe_nvfp4(std::size_t rows, std::size_t cols, const std::string& block, const std::string& axis, const std::string& preset,
                                 std::optional<std::string> layout, std::optional<std::string> rounding, std::optional<bool> hadamard,
                                 bool random_signs, std::uint64_t seed, std::uint32_t philox_stream, bool tensor_scale_from_amax) {
  if (block != "1x16" && block != "16x16") value_error("block '" + block + "' is not one of 1x16, 16x16");
  const bool two_d = block == "16x16";
  const bool rotate = hadamard.value_or(false);
  nvfp4_description d;
  d.preset = preset;
  d.layout = {two_d ? mxkit::formats::nvfp4_2d : mxkit::formats::nvfp4, parse_enum<mxkit::block_axis>(axis, "axis"), rows, cols};
  mxkit::detail::check_nvfp4_layout(d.layout, "describe_nvfp4");
  const mxkit::scale_layout scales = layout ? parse_enum<mxkit::scale_layout>(*layout, "scale_layout") : mxkit::scale_layout::row_major;
  if (preset == "mxkit") {
    d.storage = mxkit::own_storage(scales);
    d.options.hadamard = rotate;
    if (rounding) d.options.round = parse_enum<mxkit::rounding>(*rounding, "rounding");
  } else if (preset == "te_nvfp4" || preset == "torchao_nvfp4") {
    // The presets are the peers' quantizers as they are: what they do not model is refused, not
    // silently dropped (their stochastic rounding draws the peers' own bits; torchao has no RHT
    // and no 16 x 16 blocks; TE's RHT signs are TE's).
    if (rounding && *rounding != "nearest_even")
      value_error("rounding '" + *rounding + "' with preset '" + preset + "': the preset rounds to nearest_even only (the peer's stochastic rounding is not modeled)");
    if (random_signs) value_error("random_signs with preset '" + preset + "': the preset's rotation signs are the peer's own");
    if (preset == "torchao_nvfp4" && rotate) value_error("hadamard with preset 'torchao_nvfp4': torchao's NVFP4 quantizer does not rotate");
    if (preset == "torchao_nvfp4" && two_d) value_error("block '16x16' with preset 'torchao_nvfp4': torchao's NVFP4 quantizer scales 1x16 blocks");
    try {
      d.peer = preset == "te_nvfp4" ? mxkit::ref::peers::te_nvfp4(rotate, two_d, scales) : mxkit::ref::peers::torchao_nvfp4(scales, true);
    } catch (const std::invalid_argument& e) {  // the peer's own rule, with the argument that broke it
      value_error("scale_layout '" + std::string(mxkit::name_of(scales)) + "' with preset '" + preset + "': " + e.what());
    }
    d.name = d.peer->name;
    d.options = d.peer->options(d.layout.axis);
    d.quirks = d.peer->quirks;
    d.storage = d.peer->storage(d.layout.axis, rows, cols);
  } else {
    value_error("unknown NVFP4 preset '" + preset + "'; one of mxkit, te_nvfp4, torchao_nvfp4");
  }
  if (random_signs && !rotate) value_error("random_signs needs hadamard=True (they are the signs of the rotation)");
  if (random_signs) d.options.hadamard_signs = mxkit::hadamard_sign_mask(seed);
  d.options.seed = seed;
  d.options.stream = philox_stream;
  d.tensor_scale_from_amax = tensor_scale_from_amax;
  mxkit::detail::check_nvfp4_foreign_storage(d.view(), "describe_nvfp4");
  return d;
}

// The stored tensor scale of a copy, as its formula reads it (TE: an amax >= 0; mxkit, torchao: a
// positive normal float), refused with the argument's name.
void check_nvfp4_tensor_scale(const nvfp4_description& d, float t, const char* entry) {
  try {
    mxkit::detail::check_nvfp4_stored(d.quirks.formula, t, entry);
  } catch (const std::invalid_argument& e) {
    value_error(std::string(e.what()) + " (tensor_scale=" + std::to_string(t) + ")");
  }
}

// One copy: (codes, scales, stored tensor scale, computed from the amax). The peers' copies come
// from quantize_like (their formula, stored their way); mxkit's from ref::quantize.
py::tuple nvfp4_quantize_host(const tensor_ref& x, const nvfp4_description& d, std::optional<float> tensor_scale, unsigned threads) {
  if (!x.on_host()) value_error("quantize: nvfp4_quantize_host reads host memory; x is " + x.describe() + " (nvfp4_quantize_device takes CUDA tensors)");
  const matrix_arg m = input_matrix(x, "quantize");
  if (m.rows != d.layout.rows || m.cols != d.layout.cols) value_error("quantize: the description is for " + d.what() + " but x is " + x.describe());
  if (tensor_scale) check_nvfp4_tensor_scale(d, *tensor_scale, "quantize");
  mxkit::nvfp4_foreign_buffers b;
  {
    py::gil_scoped_release nogil;
    b = with_host_matrix(m, [&](auto in) {
      if (d.peer) {
        mxkit::ref::nvfp4_preset p = *d.peer;
        return mxkit::ref::quantize_like(p, in, d.layout.axis, tensor_scale, threads);
      }
      const mxkit::nvfp4_tensor t = mxkit::ref::quantize(in, d.layout.format, d.layout.axis, d.options, tensor_scale, threads);
      return mxkit::store_foreign(t, d.storage);
    });
  }
  const float stored = b.tensor_scale;
  const bool from_amax = b.tensor_scale_from_amax;
  return py::make_tuple(numpy_bytes(std::move(b.data), d.data_shape()), numpy_bytes(std::move(b.scales), d.scale_shape()), stored, from_amax);
}

// Checks the buffers against the description: codes exactly, scales at least (a padded
// allocation), as the MX entry points do; a 2-D codes array of another shape is refused too.
mxkit::nvfp4_foreign_view nvfp4_buffers(const tensor_ref& codes, const tensor_ref& scales, const nvfp4_description& d, float tensor_scale,
                                        const char* entry, size_rule scale_rule) {
  const byte_buffer c = host_bytes(codes, "codes"), s = host_bytes(scales, "scales");
  check_size(entry, "codes", c.size, d.data_bytes(), d.what());
  check_size(entry, "scales", s.size, d.scale_bytes(), d.what(), scale_rule);
  if (codes.shape.size() == 2 && codes.shape != d.data_shape())
    value_error(std::string(entry) + ": codes has shape " + shape_text(codes.shape) + ", but " + d.what() + " stores its codes as " +
                shape_text(d.data_shape()) + "; check shape and axis");
  check_nvfp4_tensor_scale(d, tensor_scale, entry);
  return d.view({c.data, c.size}, {s.data, s.size}, tensor_scale);
}

// Logical [rows, cols] floats. The copy is moved into mxkit's storage (bytes only: codes and
// scales read through the description's addressing) under the decode scale of its formula (TE
// stores the amax; it decodes with S_dec), and ref::dequantize does the arithmetic.
py::object nvfp4_dequantize_host(const tensor_ref& codes, const tensor_ref& scales, const nvfp4_description& d, float tensor_scale) {
  const mxkit::nvfp4_foreign_view v = nvfp4_buffers(codes, scales, d, tensor_scale, "dequantize", size_rule::exact);
  std::vector<float> out;
  {
    py::gil_scoped_release nogil;
    const float decode = mxkit::detail::with_nvfp4_scaler(d.quirks.formula, tensor_scale, [](const auto& s) { return s.decode_tensor_scale(); });
    const mxkit::block_layout& l = d.layout;
    mxkit::nvfp4_tensor own(l, d.options, decode, d.tensor_scale_from_amax);
    const std::size_t stored = v.stored_length();  // positions past it (TE, torchao store whole blocks) stay the zero padding
    for (std::size_t line = 0; line < l.lines(); ++line) {
      std::uint8_t* row = own.data().data() + line * l.line_bytes();
      for (std::size_t p = 0; p < stored; ++p) mxkit::store_code(row, p, v.code(line, p), 4);
      for (std::size_t b = 0; b < l.blocks_per_line(); ++b) own.scales()[line * l.blocks_per_line() + b] = v.scale(line, b);
    }
    out = mxkit::ref::dequantize(own);
  }
  return numpy_floats(std::move(out), {static_cast<std::int64_t>(d.layout.rows), static_cast<std::int64_t>(d.layout.cols)});
}

struct nvfp4_validation_result {
  mxkit::ref::nvfp4_validation_report report;
  std::string text;
  bool diagnosed = false;
  std::string diagnosis, passing_change;
  std::vector<std::pair<std::string, std::size_t>> tried;  // (change, mismatches)
};

py::dict nvfp4_mismatch_arrays(const mxkit::ref::nvfp4_validation_report& r) {
  using kind_t = mxkit::ref::nvfp4_mismatch_kind;
  // Decoded as a consumer of either copy would: the two tensor scales; the two E4M3 scales; an
  // element (or padding) code times its block's scale times the formula's decode scale.
  return mismatch_columns(r.mismatches, "U12", [](const mxkit::ref::nvfp4_mismatch& m) { return std::string(mxkit::name_of(m.kind)); },
                          [](const mxkit::ref::nvfp4_mismatch& m) {
                            if (m.kind == kind_t::tensor_scale) return std::pair(m.expected_tensor_scale, m.actual_tensor_scale);
                            if (m.kind == kind_t::scale || m.scale_entry)
                              return std::pair(mxkit::e4m3::from_bits(m.expected).to_float(), mxkit::e4m3::from_bits(m.actual).to_float());
                            return std::pair(
                                mxkit::nvfp4_decode(mxkit::e2m1::from_bits(m.expected), mxkit::e4m3::from_bits(m.scale), m.decode_scale),
                                mxkit::nvfp4_decode(mxkit::e2m1::from_bits(m.actual), mxkit::e4m3::from_bits(m.actual_scale), m.decode_scale));
                          });
}

nvfp4_validation_result nvfp4_validate_host(const tensor_ref& x, const tensor_ref& codes, const tensor_ref& scales, const nvfp4_description& d,
                                            float tensor_scale, std::size_t max_reported, bool strict_nan_blocks, bool check_padding, bool diagnose,
                                            unsigned threads) {
  if (!x.on_host()) value_error("validate: x is " + x.describe() + "; validation reads host memory");
  const matrix_arg m = input_matrix(x, "validate");
  if (m.rows != d.layout.rows || m.cols != d.layout.cols) value_error("validate: the description is for " + d.what() + " but x is " + x.describe());
  const mxkit::nvfp4_foreign_view v = nvfp4_buffers(codes, scales, d, tensor_scale, "validate", size_rule::at_least);
  mxkit::ref::nvfp4_validate_options o;
  o.max_reported = max_reported;
  o.strict_nan_blocks = strict_nan_blocks;
  o.check_padding = check_padding;
  o.quirks = d.quirks;
  o.threads = threads;
  nvfp4_validation_result r;
  py::gil_scoped_release nogil;
  with_host_matrix(m, [&](auto in) {
    r.report = mxkit::ref::validate(in, v, o);
    if (!r.report.ok() && diagnose) {
      const mxkit::ref::nvfp4_layout_diagnosis dg = mxkit::ref::diagnose_layout(in, v, o);
      r.diagnosed = true;
      r.diagnosis = dg.explanation;
      if (const mxkit::ref::nvfp4_layout_candidate* p = dg.passing()) r.passing_change = p->change;
      for (const mxkit::ref::nvfp4_layout_candidate& t : dg.tried) r.tried.emplace_back(t.change, t.mismatches);
    }
  });
  r.text = mxkit::ref::to_string(r.report);
  if (r.diagnosed) r.text += "\n  diagnosis: " + r.diagnosis;
  return r;
}

// ---- NVFP4 on the device --------------------------------------------------------------------
// gpu::quantize_nvfp4 and the NVFP4 GEMM (gpu/gemm/nvfp4.hpp, through device.hpp) from Python,
// as quantize_device and gemm_device do for MX: the caller's stream, memory from the caller's
// framework (or mxkit's pool), no synchronization. The device quantizer writes mxkit's copies
// (preset mxkit: any block shape, axis, scale layout, rounding and rotation) with the host
// reference's bytes; it has no peer's formula or storage, so the presets are refused by name.
// Each copy's tensor scale is a 1-element float32 tensor on the device, where the quantizer
// computes it from the amax and the GEMM reads it: a Python float would wait for the device.

// A description the device reads and writes: mxkit's storage, which is the device copy's
// (device_nvfp4_tensor: data_bytes() codes, scale_storage_size() scales).
void check_device_nvfp4(const nvfp4_description& d, const std::string& entry, const std::string& name) {
  if (d.peer)
    value_error(entry + ": " + name + " is " + d.what() + ", but the device NVFP4 " + (entry == "gemm" ? "GEMM" : "quantizer") +
                " takes mxkit's copies only (preset='mxkit'); preset '" + d.preset + "' is the host reference's");
  const mxkit::block_layout& l = d.layout;
  if (d.data_bytes() != l.data_bytes() || d.scale_bytes() != mxkit::scale_storage_size(d.storage.scales, l.lines(), l.blocks_per_line()))
    value_error(entry + ": " + name + " is " + d.what() + ", which is not stored as the device stores its copies");
}

// One copy's part on the device: codes, scales (bytes) or the tensor scale (one float32).
std::vector<std::int64_t> nvfp4_part_shape(const nvfp4_description& d, int part) {
  return part == 0 ? d.data_shape() : part == 1 ? d.scale_shape() : std::vector<std::int64_t>{1};
}
std::size_t nvfp4_part_bytes(const nvfp4_description& d, int part) { return part == 0 ? d.data_bytes() : part == 1 ? d.scale_bytes() : sizeof(float); }
constexpr dlpack::DLDataType float32_type{dlpack::kDLFloat, 32, 1};

// copies: one description, or the rowwise and columnwise ones of one call (one quantize pass
// writes both). out: the 3 or 6 arrays to write (codes, scales, tensor scale per copy), or None
// for pool memory. Returns a (codes, scales, tensor_scale) tuple per copy.
py::list nvfp4_quantize_device(const tensor_ref& x, const std::vector<nvfp4_description>& copies, std::optional<float> tensor_scale,
                               std::uintptr_t stream, py::object out) {
  const matrix_arg m = input_matrix(x, "quantize");
  if (!x.on_cuda()) value_error("quantize: the device NVFP4 quantizer takes a CUDA tensor, got " + x.describe());
  if (copies.empty() || copies.size() > 2 ||
      (copies.size() == 2 && (copies[0].layout.axis != mxkit::block_axis::rowwise || copies[1].layout.axis != mxkit::block_axis::columnwise)))
    value_error("quantize: the device NVFP4 quantizer writes one copy, or the rowwise and the columnwise one");
  const nvfp4_description& d = copies.front();
  for (const nvfp4_description& c : copies) {
    check_device_nvfp4(c, "quantize", "the copy");
    if (m.rows != c.layout.rows || m.cols != c.layout.cols) value_error("quantize: the description is for " + c.what() + " but x is " + x.describe());
    // One call quantizes both copies with one format, one set of options and one scale layout.
    if (c.layout.tile_lines() != d.layout.tile_lines() || !(c.options == d.options) || c.storage.scales != d.storage.scales ||
        c.tensor_scale_from_amax != d.tensor_scale_from_amax)
      value_error("quantize: the two copies' descriptions differ in more than their axis (" + d.what() + ", " + c.what() + ")");
  }
  if (tensor_scale) check_nvfp4_tensor_scale(d, *tensor_scale, "quantize");
  std::vector<tensor_ref> refs;
  if (!out.is_none()) {
    refs = out.cast<std::vector<tensor_ref>>();
    if (refs.size() != 3 * copies.size())
      value_error("quantize: " + std::to_string(refs.size()) + " outputs for " + std::to_string(copies.size()) + " NVFP4 copies (3 each)");
  }
  const bool pooled = refs.empty();
  const int dev = x.device.device_id;
  device::nvfp4_targets targets;
  targets.scales = d.storage.scales;
  static const char* const parts[] = {"codes", "scales", "tensor scale"};
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const nvfp4_description& c = copies[i];
    void* ptr[3];
    for (int part = 0; part < 3; ++part) {
      const std::vector<std::int64_t> shape = nvfp4_part_shape(c, part);
      const dlpack::DLDataType dtype = part == 2 ? float32_type : dlpack::DLDataType{dlpack::kDLUInt, 8, 1};
      if (pooled) refs.push_back(pool_result(nvfp4_part_bytes(c, part), shape, dtype, dev, stream));
      const tensor_ref& t = refs[3 * i + static_cast<std::size_t>(part)];
      check_output(t, std::string("quantize: out (") + (copies.size() > 1 ? std::string(mxkit::name_of(c.layout.axis)) + " " : "") + parts[part] + ")",
                   shape, x, dtype);
      ptr[part] = t.data;
    }
    // A copy of no byte (an empty input) is asked for by its tensor scale alone: a framework's
    // empty tensor may have any pointer, which the quantizer would check for alignment.
    auto* data = c.data_bytes() ? static_cast<std::uint8_t*>(ptr[0]) : nullptr;
    auto* scales = c.data_bytes() ? static_cast<std::uint8_t*>(ptr[1]) : nullptr;
    auto* ts = static_cast<float*>(ptr[2]);
    if (c.layout.axis == mxkit::block_axis::rowwise) {
      targets.rowwise_data = data;
      targets.rowwise_scales = scales;
      targets.rowwise_tensor_scale = ts;
    } else {
      targets.columnwise_data = data;
      targets.columnwise_scales = scales;
      targets.columnwise_tensor_scale = ts;
    }
  }
  device::quantize_nvfp4(m.data, m.type, m.rows, m.cols, m.ld, d.layout.format, d.options, tensor_scale, targets, dev, stream);
  py::list result;
  for (std::size_t i = 0; i < refs.size(); i += 3) result.append(py::make_tuple(py::cast(refs[i]), py::cast(refs[i + 1]), py::cast(refs[i + 2])));
  return result;
}

// The amax an NVFP4 copy of x takes its tensor scale from (mxkit.nvfp4_amax; mxkit's rule,
// block/nvfp4_scale.hpp: the largest finite magnitude among the values the copy quantizes, rotated
// when it rotates), for the parts of a sharded tensor: their maximum is the whole tensor's.
float nvfp4_amax_host(const tensor_ref& x, const nvfp4_description& d) {
  if (!x.on_host()) value_error("nvfp4_amax: nvfp4_amax_host reads host memory; x is " + x.describe());
  const matrix_arg m = input_matrix(x, "nvfp4_amax");
  if (m.rows != d.layout.rows || m.cols != d.layout.cols) value_error("nvfp4_amax: the description is for " + d.what() + " but x is " + x.describe());
  if (d.peer) value_error("nvfp4_amax: " + d.what() + " is a peer's copy; the amax is mxkit's rule (preset='mxkit')");
  py::gil_scoped_release nogil;
  return with_host_matrix(m, [&](auto in) { return mxkit::detail::nvfp4_copy_amax(in, d.layout, d.options, false, 0); });
}
// The same for a CUDA x (gpu::nvfp4_amax): one float32 on x's device, in `out` or mxkit's pool,
// written on `stream` without a synchronization.
tensor_ref nvfp4_amax_device(const tensor_ref& x, const nvfp4_description& d, std::uintptr_t stream, std::optional<tensor_ref> out) {
  const matrix_arg m = input_matrix(x, "nvfp4_amax");
  if (!x.on_cuda()) value_error("nvfp4_amax: nvfp4_amax_device takes a CUDA tensor, got " + x.describe());
  if (m.rows != d.layout.rows || m.cols != d.layout.cols) value_error("nvfp4_amax: the description is for " + d.what() + " but x is " + x.describe());
  check_device_nvfp4(d, "nvfp4_amax", "the copy");
  const int dev = x.device.device_id;
  tensor_ref t = out ? *out : pool_result(sizeof(float), {1}, float32_type, dev, stream);
  check_output(t, "nvfp4_amax: out", {1}, x, float32_type);
  device::nvfp4_amax(m.data, m.type, m.rows, m.cols, m.ld, d.layout.format, d.options, d.layout.axis, static_cast<float*>(t.data), dev, stream);
  return t;
}

// D[P,Q] = alpha * A . B^T, P and Q the two copies' lines, both blocked along the same R (the
// operand roles of gpu/gemm/nvfp4.hpp): two device copies with their device tensor scales.
// The shape, rotation and block checks are the C++ GEMM's own (a ValueError naming the value).
tensor_ref nvfp4_gemm_device(const tensor_ref& a_codes, const tensor_ref& a_scales, const tensor_ref& a_tensor_scale, const nvfp4_description& a,
                             const tensor_ref& b_codes, const tensor_ref& b_scales, const tensor_ref& b_tensor_scale, const nvfp4_description& b,
                             bool bf16_output, float alpha, std::uintptr_t stream, std::optional<tensor_ref> out) {
  const std::pair<const tensor_ref*, const char*> operands[] = {{&a_codes, "a.codes"}, {&a_scales, "a.scales"}, {&b_codes, "b.codes"},
                                                                {&b_scales, "b.scales"}};
  for (const auto& [t, name] : operands) {
    if (!t->on_cuda() || !byte_dtype(*t) || !t->compact())
      value_error(std::string("gemm: ") + name + " must be a contiguous byte tensor on a CUDA device, got " + t->describe());
    if (!same_device(*t, a_codes)) value_error(std::string("gemm: ") + name + " is " + t->describe() + ", but a.codes is " + a_codes.describe());
  }
  for (const auto& [t, name] : {std::pair{&a_tensor_scale, "a.tensor_scale"}, std::pair{&b_tensor_scale, "b.tensor_scale"}}) {
    if (!t->on_cuda() || t->dtype.code != dlpack::kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1 || t->elements() != 1)
      value_error(std::string("gemm: ") + name + " must be one float32 on a CUDA device (as quantize returns it), got " + t->describe());
    if (!same_device(*t, a_codes)) value_error(std::string("gemm: ") + name + " is " + t->describe() + ", but a.codes is " + a_codes.describe());
  }
  check_device_nvfp4(a, "gemm", "a");
  check_device_nvfp4(b, "gemm", "b");
  check_size("gemm", "a.codes", a_codes.nbytes(), a.data_bytes(), a.what());
  check_size("gemm", "a.scales", a_scales.nbytes(), a.scale_bytes(), a.what());
  check_size("gemm", "b.codes", b_codes.nbytes(), b.data_bytes(), b.what());
  check_size("gemm", "b.scales", b_scales.nbytes(), b.scale_bytes(), b.what());
  const int dev = a_codes.device.device_id;
  const std::size_t p = a.layout.lines(), q = b.layout.lines();
  const dlpack::DLDataType dtype = bf16_output ? dlpack::DLDataType{dlpack::kDLBfloat, 16, 1} : float32_type;
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(p), static_cast<std::int64_t>(q)};
  tensor_ref d = out ? *out : pool_result(p * q * (bf16_output ? 2 : 4), shape, dtype, dev, stream);
  check_output(d, "gemm: out", shape, a_codes, dtype);
  const auto view = [](const nvfp4_description& c, const tensor_ref& codes, const tensor_ref& scales) {
    return mxkit::nvfp4_const_view{c.layout, c.options, static_cast<const std::uint8_t*>(codes.data), static_cast<const std::uint8_t*>(scales.data),
                                   c.storage.scales, 1.0f, c.tensor_scale_from_amax};
  };
  device::nvfp4_gemm(view(a, a_codes, a_scales), static_cast<const float*>(a_tensor_scale.data), view(b, b_codes, b_scales),
                     static_cast<const float*>(b_tensor_scale.data), d.data, bf16_output, q, alpha, dev, stream);
  return d;
}

// The device GEMM's oracle on two host copies of mxkit's storage (ref/nvfp4_gemm.hpp: each block
// pair's sum exact, rounded once, added in block order; times fl(t_a t_b)), into a float32 out,
// rounded to bf16 values when bf16, as gemm_host does for MX.
void nvfp4_gemm_host(const tensor_ref& a_codes, const tensor_ref& a_scales, const nvfp4_description& a, float a_tensor_scale,
                     const tensor_ref& b_codes, const tensor_ref& b_scales, const nvfp4_description& b, float b_tensor_scale, const tensor_ref& out,
                     bool bf16) {
  check_device_nvfp4(a, "gemm_host", "a");
  check_device_nvfp4(b, "gemm_host", "b");
  const mxkit::nvfp4_foreign_view av = nvfp4_buffers(a_codes, a_scales, a, a_tensor_scale, "gemm_host", size_rule::exact);
  const mxkit::nvfp4_foreign_view bv = nvfp4_buffers(b_codes, b_scales, b, b_tensor_scale, "gemm_host", size_rule::exact);
  const auto p = a.layout.lines(), q = b.layout.lines();
  check_output(out, "gemm_host: out", {static_cast<std::int64_t>(p), static_cast<std::int64_t>(q)}, a_codes, float32_type);
  const auto view = [](const nvfp4_description& c, const mxkit::nvfp4_foreign_view& v, float t) {
    return mxkit::nvfp4_const_view{c.layout, c.options, v.data.data(), v.scales.data(), c.storage.scales, t, c.tensor_scale_from_amax};
  };
  float* d = static_cast<float*>(out.data);
  py::gil_scoped_release nogil;
  if (!bf16) {
    mxkit::ref::gemm(view(a, av, a_tensor_scale), view(b, bv, b_tensor_scale), mxkit::matrix_view<float>{d, p, q});
    return;
  }
  std::vector<mxkit::bfloat16> tmp(p * q);
  mxkit::ref::gemm(view(a, av, a_tensor_scale), view(b, bv, b_tensor_scale), mxkit::matrix_view<mxkit::bfloat16>{tmp.data(), p, q});
  for (std::size_t i = 0; i < tmp.size(); ++i) d[i] = tmp[i].to_float();
}

void register_nvfp4(py::module_& m) {
  py::class_<nvfp4_description>(m, "NVFP4Description", "How one NVFP4 copy is stored and was quantized (its tensor scale travels beside it)")
      .def_readonly("preset", &nvfp4_description::preset)
      .def_readonly("name", &nvfp4_description::name)
      .def_property_readonly("format", [](const nvfp4_description&) { return std::string("nvfp4"); })
      .def_property_readonly("block", &nvfp4_description::block)
      .def_property_readonly("axis", [](const nvfp4_description& d) { return std::string(mxkit::name_of(d.layout.axis)); })
      .def_property_readonly("rows", [](const nvfp4_description& d) { return d.layout.rows; })
      .def_property_readonly("cols", [](const nvfp4_description& d) { return d.layout.cols; })
      .def_property_readonly("scale_layout", [](const nvfp4_description& d) { return std::string(mxkit::name_of(d.storage.scales)); })
      .def_property_readonly("nibbles", [](const nvfp4_description& d) { return std::string(mxkit::name_of(d.storage.nibbles)); })
      .def_property_readonly("columnwise", [](const nvfp4_description& d) { return std::string(mxkit::name_of(d.storage.columnwise)); })
      .def_property_readonly("padding_stored", [](const nvfp4_description& d) { return d.storage.padding_stored; })
      .def_property_readonly("rounding", [](const nvfp4_description& d) { return std::string(mxkit::name_of(d.options.round)); })
      .def_property_readonly("hadamard", [](const nvfp4_description& d) { return d.options.hadamard; })
      .def_property_readonly("hadamard_signs", [](const nvfp4_description& d) { return d.options.hadamard_signs; })
      .def_property_readonly("seed", [](const nvfp4_description& d) { return d.options.seed; })
      .def_property_readonly("philox_stream", [](const nvfp4_description& d) { return d.options.stream; })
      .def_property_readonly("formula", [](const nvfp4_description& d) { return std::string(mxkit::name_of(d.quirks.formula)); })
      .def_readonly("tensor_scale_from_amax", &nvfp4_description::tensor_scale_from_amax)
      .def_property_readonly("data_bytes", &nvfp4_description::data_bytes)
      .def_property_readonly("scale_bytes", &nvfp4_description::scale_bytes)
      .def_property_readonly("data_shape", &nvfp4_description::data_shape)
      .def_property_readonly("scale_shape", &nvfp4_description::scale_shape)
      .def("__repr__", [](const nvfp4_description& d) { return "<mxkit copy: " + d.what() + ">"; });
  m.def("describe_nvfp4", &describe_nvfp4, py::arg("rows"), py::arg("cols"), py::arg("block"), py::arg("axis"), py::arg("preset"),
        py::arg("layout") = py::none(), py::arg("rounding") = py::none(), py::arg("hadamard") = py::none(), py::arg("random_signs") = false,
        py::arg("seed") = 0, py::arg("philox_stream") = 0, py::arg("tensor_scale_from_amax") = true);
  m.def("nvfp4_quantize_host", &nvfp4_quantize_host, py::arg("x"), py::arg("copy"), py::arg("tensor_scale") = py::none(), py::arg("threads") = 0);
  m.def("nvfp4_dequantize_host", &nvfp4_dequantize_host, py::arg("codes"), py::arg("scales"), py::arg("copy"), py::arg("tensor_scale"));

  using R = nvfp4_validation_result;
  py::class_<R>(m, "NVFP4ValidationResult")
      .def_property_readonly("ok", [](const R& v) { return v.report.ok(); })
      .def_property_readonly("tensor_scale_checked", [](const R& v) { return v.report.tensor_scale_checked; })
      .def_property_readonly("expected_tensor_scale", [](const R& v) { return v.report.expected_tensor_scale; })
      .def_property_readonly("actual_tensor_scale", [](const R& v) { return v.report.actual_tensor_scale; })
      .def_property_readonly("tensor_scale_mismatches", [](const R& v) { return v.report.tensor_scale_mismatches; })
      .def_property_readonly("scales_checked", [](const R& v) { return v.report.scales_checked; })
      .def_property_readonly("elements_checked", [](const R& v) { return v.report.elements_checked; })
      .def_property_readonly("padding_checked", [](const R& v) { return v.report.padding_checked; })
      .def_property_readonly("scale_mismatches", [](const R& v) { return v.report.scale_mismatches; })
      .def_property_readonly("element_mismatches", [](const R& v) { return v.report.element_mismatches; })
      .def_property_readonly("padding_mismatches", [](const R& v) { return v.report.padding_mismatches; })
      .def_property_readonly("nan_blocks_skipped", [](const R& v) { return v.report.nan_blocks_skipped; })
      .def_property_readonly("mismatch_count", [](const R& v) { return v.report.mismatch_count(); })
      .def_property_readonly("mismatches", [](const R& v) { return nvfp4_mismatch_arrays(v.report); })
      .def_readonly("diagnosed", &R::diagnosed)
      .def_readonly("diagnosis", &R::diagnosis)
      .def_readonly("passing_change", &R::passing_change)
      .def_readonly("tried", &R::tried)
      .def("summary", [](const R& v) { return v.report.summary(); })
      .def("__str__", [](const R& v) { return v.text; });
  m.def("nvfp4_validate_host", &nvfp4_validate_host, py::arg("x"), py::arg("codes"), py::arg("scales"), py::arg("copy"), py::arg("tensor_scale"),
        py::arg("max_reported") = 16, py::arg("strict_nan_blocks") = false, py::arg("check_padding") = true, py::arg("diagnose") = true,
        py::arg("threads") = 0);
  m.def("nvfp4_amax_host", &nvfp4_amax_host, py::arg("x"), py::arg("copy"));
  m.def("nvfp4_amax_device", &nvfp4_amax_device, py::arg("x"), py::arg("copy"), py::arg("stream"), py::arg("out") = py::none());
  m.def("nvfp4_tensor_scale", [](float amax) { return mxkit::nvfp4_tensor_scale(amax); }, py::arg("amax"));
  m.def("nvfp4_quantize_device", &nvfp4_quantize_device, py::arg("x"), py::arg("copies"), py::arg("tensor_scale"), py::arg("stream"),
        py::arg("out") = py::none());
  m.def("nvfp4_gemm_device", &nvfp4_gemm_device, py::arg("a_codes"), py::arg("a_scales"), py::arg("a_tensor_scale"), py::arg("a"), py::arg("b_codes"),
        py::arg("b_scales"), py::arg("b_tensor_scale"), py::arg("b"), py::arg("bf16_output"), py::arg("alpha"), py::arg("stream"),
        py::arg("out") = py::none());
  m.def("nvfp4_gemm_host", &nvfp4_gemm_host, py::arg("a_codes"), py::arg("a_scales"), py::arg("a"), py::arg("a_tensor_scale"), py::arg("b_codes"),
        py::arg("b_scales"), py::arg("b"), py::arg("b_tensor_scale"), py::arg("out"), py::arg("bf16") = false);
}

}  // namespace
}  // namespace mxkit_python

PYBIND11_MODULE(_mxkit, m) {
  m.doc() = "mxkit's C++ layer; use the `mxkit` package";
  m.attr("version") = std::to_string(MXKIT_VERSION_MAJOR) + "." + std::to_string(MXKIT_VERSION_MINOR) + "." + std::to_string(MXKIT_VERSION_PATCH);
  m.attr("gpu") = device::built();

  py::class_<tensor_ref>(m, "Tensor", py::buffer_protocol(), "An array mxkit returns: DLPack (torch.from_dlpack, np.from_dlpack) and, on the host, the buffer protocol")
      .def_buffer([](tensor_ref& t) -> py::buffer_info {
        if (!t.on_host()) throw py::buffer_error("a device tensor has no host buffer; use torch.from_dlpack or cupy.from_dlpack");
        const std::string fmt = buffer_format(t);
        std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end()), strides(t.shape.size());
        py::ssize_t step = static_cast<py::ssize_t>(t.itemsize());
        for (std::size_t i = t.shape.size(); i-- > 0;) {
          strides[i] = t.strides.empty() ? step : static_cast<py::ssize_t>(t.strides[i] * static_cast<std::int64_t>(t.itemsize()));
          step *= static_cast<py::ssize_t>(t.shape[i]);
        }
        return py::buffer_info(t.data, static_cast<py::ssize_t>(t.itemsize()), fmt, static_cast<py::ssize_t>(t.shape.size()), shape, strides, t.read_only);
      })
      .def("__dlpack__", &export_capsule,
           py::arg("stream") = py::none(), py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const tensor_ref& t) { return py::make_tuple(t.device.device_type, t.device.device_id); })
      .def_property_readonly("shape", [](const tensor_ref& t) { return py::tuple(py::cast(t.shape)); })
      .def_property_readonly("dtype", &tensor_ref::dtype_name)
      .def_property_readonly("device", [](const tensor_ref& t) { return t.on_host() ? std::string("cpu") : "cuda:" + std::to_string(t.device.device_id); })
      .def_property_readonly("nbytes", &tensor_ref::nbytes)
      .def_property_readonly("data_ptr", [](const tensor_ref& t) { return reinterpret_cast<std::uintptr_t>(t.data); })
      .def_property_readonly("stream", [](const tensor_ref& t) { return t.stream; })
      .def("__repr__", [](const tensor_ref& t) { return "mxkit.Tensor(" + t.describe() + ")"; });

  m.def("import_tensor", &import_tensor, py::arg("x"), py::arg("stream") = py::none(), "Reads any DLPack or buffer-protocol array in place");
  m.def("cuda_tensor", &cuda_tensor, py::arg("data"), py::arg("code"), py::arg("bits"), py::arg("shape"), py::arg("strides"),
        py::arg("device"), py::arg("owner"), "A CUDA tensor from its pointer, DLPack dtype, shape, strides and device (no capsule)");

  py::class_<copy_description>(m, "CopyDescription", "How one MX copy is stored and was quantized")
      .def_readonly("preset", &copy_description::preset)
      .def_readonly("name", &copy_description::name)
      .def_property_readonly("format", [](const copy_description& d) { return std::string(mxkit::format_name(d.layout.format)); })
      .def_property_readonly("axis", [](const copy_description& d) { return std::string(mxkit::name_of(d.layout.axis)); })
      .def_property_readonly("rows", [](const copy_description& d) { return d.layout.rows; })
      .def_property_readonly("cols", [](const copy_description& d) { return d.layout.cols; })
      .def_property_readonly("scale_layout", [](const copy_description& d) { return std::string(mxkit::name_of(d.storage.scales)); })
      .def_property_readonly("nibbles", [](const copy_description& d) { return std::string(mxkit::name_of(d.storage.nibbles)); })
      .def_property_readonly("columnwise", [](const copy_description& d) { return std::string(mxkit::name_of(d.storage.columnwise)); })
      .def_property_readonly("rule", [](const copy_description& d) { return std::string(mxkit::name_of(d.options.rule)); })
      .def_property_readonly("rounding", [](const copy_description& d) { return std::string(mxkit::name_of(d.options.round)); })
      .def_property_readonly("hadamard", [](const copy_description& d) { return d.options.hadamard; })
      .def_property_readonly("seed", [](const copy_description& d) { return d.options.seed; })
      .def_property_readonly("philox_stream", [](const copy_description& d) { return d.options.stream; })
      .def_property_readonly("data_bytes", &copy_description::data_bytes)
      .def_property_readonly("scale_bytes", &copy_description::scale_bytes)
      .def_property_readonly("data_shape", &copy_description::data_shape)
      .def_property_readonly("scale_shape", &copy_description::scale_shape)
      .def_property_readonly("own_storage", &copy_description::own_storage)
      .def("__repr__", [](const copy_description& d) { return "<mxkit copy: " + d.what() + ">"; });

  m.def("describe_copy", &describe_copy, py::arg("rows"), py::arg("cols"), py::arg("format"), py::arg("axis"), py::arg("preset") = "mxkit",
        py::arg("layout") = py::none(), py::arg("rule") = py::none(), py::arg("rounding") = py::none(), py::arg("hadamard") = py::none(),
        py::arg("random_signs") = false, py::arg("seed") = 0, py::arg("philox_stream") = 0, py::arg("nibbles") = py::none(),
        py::arg("columnwise") = py::none(),
        py::arg("padding_stored") = py::none());
  m.def("quantize_host", &quantize_host, py::arg("x"), py::arg("copy"), py::arg("threads") = 0, py::arg("out") = py::none());
  m.def("quantize_device", &quantize_device, py::arg("x"), py::arg("copies"), py::arg("stream"), py::arg("out") = py::none());
  m.def("quantize_device_raw", &quantize_device_raw, py::arg("x"), py::arg("code"), py::arg("bits"), py::arg("rows"), py::arg("cols"),
        py::arg("ld"), py::arg("device"), py::arg("first"), py::arg("second").none(true), py::arg("stream"), py::arg("out"));
  m.def("dequantize_host", &dequantize_host, py::arg("codes"), py::arg("scales"), py::arg("copy"));
  m.def("encode", &encode, py::arg("x"), py::arg("format"), py::arg("rounding") = "nearest_even", py::arg("overflow") = "saturate");
  m.def("decode", &decode, py::arg("codes"), py::arg("format"));
  m.def("pack_fp4", &pack_fp4, py::arg("codes"), py::arg("nibbles"));
  m.def("unpack_fp4", &unpack_fp4, py::arg("packed"), py::arg("nibbles"));

  py::class_<validation_result>(m, "ValidationResult")
      .def_property_readonly("ok", [](const validation_result& v) { return v.report.ok(); })
      .def_property_readonly("scales_checked", [](const validation_result& v) { return v.report.scales_checked; })
      .def_property_readonly("elements_checked", [](const validation_result& v) { return v.report.elements_checked; })
      .def_property_readonly("padding_checked", [](const validation_result& v) { return v.report.padding_checked; })
      .def_property_readonly("scale_mismatches", [](const validation_result& v) { return v.report.scale_mismatches; })
      .def_property_readonly("element_mismatches", [](const validation_result& v) { return v.report.element_mismatches; })
      .def_property_readonly("padding_mismatches", [](const validation_result& v) { return v.report.padding_mismatches; })
      .def_property_readonly("nan_blocks_skipped", [](const validation_result& v) { return v.report.nan_blocks_skipped; })
      .def_property_readonly("mismatch_count", [](const validation_result& v) { return v.report.mismatch_count(); })
      .def_property_readonly("mismatches", [](const validation_result& v) { return mismatch_arrays(v.report); })
      .def_readonly("diagnosed", &validation_result::diagnosed)
      .def_readonly("diagnosis", &validation_result::diagnosis)
      .def_readonly("passing_change", &validation_result::passing_change)
      .def_readonly("tried", &validation_result::tried)
      .def("summary", [](const validation_result& v) { return v.report.summary(); })
      .def("__str__", [](const validation_result& v) { return v.text; });
  m.def("validate_host", &validate_host, py::arg("x"), py::arg("codes"), py::arg("scales"), py::arg("copy"), py::arg("max_reported") = 16,
        py::arg("strict_nan_blocks") = false, py::arg("check_padding") = true, py::arg("diagnose") = true, py::arg("threads") = 0);

  py::class_<gemm_result>(m, "GemmValidationResult")
      .def_property_readonly("ok", [](const gemm_result& g) { return g.report.ok(); })
      .def_property_readonly("rows_checked", [](const gemm_result& g) { return g.report.rows_checked; })
      .def_property_readonly("elements_checked", [](const gemm_result& g) { return g.report.elements_checked; })
      .def_property_readonly("over_bound", [](const gemm_result& g) { return g.report.over_bound; })
      .def_property_readonly("nan_mismatches", [](const gemm_result& g) { return g.report.nan_mismatches; })
      .def_property_readonly("max_ratio", [](const gemm_result& g) { return g.report.max_ratio; })
      .def_property_readonly("relative_bound", [](const gemm_result& g) { return g.report.relative_bound; })
      .def_property_readonly("worst", [](const gemm_result& g) {
        py::dict d;
        std::vector<std::int64_t> row, col;
        std::vector<double> got, want, magnitude, bound, ratio;
        for (const mxkit::ref::gemm_element_check& e : g.report.worst) {
          row.push_back(static_cast<std::int64_t>(e.row));
          col.push_back(static_cast<std::int64_t>(e.col));
          got.push_back(e.got);
          want.push_back(e.want);
          magnitude.push_back(e.magnitude);
          bound.push_back(e.bound);
          ratio.push_back(e.ratio);
        }
        d["row"] = numpy_list(row, "int64");
        d["column"] = numpy_list(col, "int64");
        d["got"] = numpy_list(got, "float64");
        d["want"] = numpy_list(want, "float64");
        d["magnitude"] = numpy_list(magnitude, "float64");
        d["bound"] = numpy_list(bound, "float64");
        d["ratio"] = numpy_list(ratio, "float64");
        return d;
      })
      .def("summary", [](const gemm_result& g) { return g.report.summary(); })
      .def("__str__", [](const gemm_result& g) { return g.text; });
  m.def("validate_gemm_host", &validate_gemm_host, py::arg("a_codes"), py::arg("a_scales"), py::arg("a"), py::arg("b_codes"), py::arg("b_scales"),
        py::arg("b"), py::arg("d"), py::arg("alpha") = 1.0f, py::arg("sample_rows") = 0, py::arg("rows") = std::vector<std::size_t>{},
        py::arg("accumulation") = "tensor_core", py::arg("relative") = 0.0, py::arg("absolute") = 0.0, py::arg("max_reported") = 8,
        py::arg("threads") = 0);
  m.def("gemm_device", &gemm_device, py::arg("a_codes"), py::arg("a_scales"), py::arg("a"), py::arg("b_codes"), py::arg("b_scales"), py::arg("b"),
        py::arg("bf16_output"), py::arg("alpha"), py::arg("stream"), py::arg("out") = py::none());

  // Training (python/mxkit/linear.py, mxkit.torch.Linear; linear_steps is the tests' oracle).
  m.attr("recipe_names") = py::cast(recipe_names());
  m.def("mxfp8_values_quantize_device", &mxfp8_values_quantize_device, py::arg("x"), py::arg("copy"), py::arg("stream"), py::arg("out"));
  m.def("gemm_sides_device", &gemm_sides_device, py::arg("a_data"), py::arg("a_scales"), py::arg("a"), py::arg("a_flag"), py::arg("b_data"),
        py::arg("b_scales"), py::arg("b"), py::arg("b_flag"), py::arg("alpha"), py::arg("stream"), py::arg("out"));
  m.def("recipe_spec", &recipe_spec, py::arg("name"));
  m.def("linear_steps", &linear_steps, py::arg("recipe"), py::arg("x"), py::arg("w"), py::arg("dy"), py::arg("device") = false,
        py::arg("activations") = "bf16", py::arg("weight") = "bf16", py::arg("history_length") = 1024, py::arg("algorithm") = "max",
        py::arg("margin") = 0, py::arg("layer_id") = 0);
  // NVIDIA's selective high-precision layers (nn/recipe.hpp): how many of a model's first and last
  // transformer layers keep bf16 linears under the NVFP4 recipe.
  m.def("nvfp4_bf16_layers", [](std::size_t n_layers) {
    return py::make_tuple(mxkit::nn::recipes::nvfp4_bf16_first_layers(n_layers), mxkit::nn::recipes::nvfp4_bf16_last_layers(n_layers));
  }, py::arg("n_layers"));
  // The C++ layer's Philox stream of (layer id, purpose, counter) (nn/parameter.hpp): the Python
  // linear draws the streams the C++ linear draws.
  m.def("mix_stream", [](std::uint64_t a, std::uint64_t b, std::uint64_t c) { return mxkit::nn::mix_stream(a, b, c); }, py::arg("a"),
        py::arg("b") = 0, py::arg("c") = 0);
  m.def("gemm_host", &gemm_host, py::arg("a_codes"), py::arg("a_scales"), py::arg("a"), py::arg("b_codes"), py::arg("b_scales"),
        py::arg("b"), py::arg("out"), py::arg("bf16"));
  m.def("fp8_cast", &fp8_cast, py::arg("x"), py::arg("fp8"), py::arg("scale"), py::arg("history") = py::none(), py::arg("codes") = py::none(),
        py::arg("transposed") = py::none(), py::arg("data_scale") = py::none(), py::arg("transposed_scale") = py::none(), py::arg("stream") = 1);
  m.def("fp8_gemm", &fp8_gemm, py::arg("a"), py::arg("a_fp8"), py::arg("a_scale"), py::arg("b"), py::arg("b_fp8"), py::arg("b_scale"),
        py::arg("out"), py::arg("bf16"), py::arg("stream") = 1);
  m.def("update_scales", &update_scales, py::arg("history"), py::arg("scale"), py::arg("fp8_max"), py::arg("algorithm"), py::arg("margin"),
        py::arg("stream") = 1);

  register_nvfp4(m);  // NVFP4 on the host and the device (the sections above)
}
