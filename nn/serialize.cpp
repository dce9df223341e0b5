#include "nn/serialize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factory.h"
#include "nn/module.h"

namespace ember::nn {

// Tensors are copied byte for byte: the format is little-endian and so is every supported host.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

using json = nlohmann::json;

struct DTypeCode {
  std::string_view code;
  DType dtype;
};
constexpr DTypeCode kCodes[] = {{"F32", kFloat32},   {"F64", kFloat64}, {"F16", kFloat16},
                                {"BF16", kBFloat16}, {"I32", kInt32},   {"I64", kInt64},
                                {"BOOL", kBool}};

std::string_view code_of(DType t) {
  for (const DTypeCode& c : kCodes)
    if (c.dtype == t) return c.code;
  return "?";
}
std::optional<DType> dtype_of(std::string_view code) {
  for (const DTypeCode& c : kCodes)
    if (c.code == code) return c.dtype;
  return std::nullopt;
}

constexpr std::string_view kMetadataKey = "__metadata__";

// ---- files ----------------------------------------------------------------------------------

std::string errno_text() { return std::strerror(errno); }

// A file written under a temporary name in the target's directory and renamed over the target
// on commit(): readers see the old file or the complete new one, never a partial write.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const char* op) : path_(path), op_(op) {
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      tmp_ = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    EMBER_CHECK(fd_ >= 0, op_, ": cannot create a temporary file next to '", path_,
                "': ", errno_text());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      EMBER_CHECK(w > 0, op_, ": writing '", tmp_, "' failed: ", errno_text());
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  void commit() {
    EMBER_CHECK(::fsync(fd_) == 0, op_, ": flushing '", tmp_, "' failed: ", errno_text());
    const int rc = ::close(fd_);
    fd_ = -1;
    EMBER_CHECK(rc == 0, op_, ": closing '", tmp_, "' failed: ", errno_text());
    EMBER_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, op_, ": renaming '", tmp_, "' to '",
                path_, "' failed: ", errno_text());
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  const char* op_;
  int fd_ = -1;
  bool committed_ = false;
};

std::string read_file(const std::string& path, const char* op) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused below
  // as not a regular file (for which the flag changes nothing).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  EMBER_CHECK(fd >= 0, op, ": cannot open '", path, "': ", errno_text());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  EMBER_CHECK(::fstat(fd, &st) == 0, op, ": cannot stat '", path, "': ", errno_text());
  EMBER_CHECK(S_ISREG(st.st_mode), op, ": '", path, "' is not a regular file");
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    EMBER_CHECK(r >= 0, op, ": reading '", path, "' failed: ", errno_text());
    if (r == 0) break;  // the file shrank while we read it: parse what is there
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

// ---- writing --------------------------------------------------------------------------------

struct Planned {
  std::string name;
  Tensor host;  // contiguous CPU tensor whose bytes are written
  uint64_t begin = 0, end = 0;
};

// The header (length prefix included) and the tensors in file order. Tensors are ordered by
// element size, largest first, then by name (as the reference writer does), so with the
// 8-byte-aligned header every tensor starts at a multiple of its element size.
std::string plan(const TensorMap& tensors, const Metadata& metadata, std::vector<Planned>& order) {
  NoGradGuard no_grad;
  order.clear();
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(name != kMetadataKey, "save_tensors: '", kMetadataKey,
                "' is reserved for metadata and cannot name a tensor");
    EMBER_CHECK(t.defined(), "save_tensors: tensor '", name, "' is undefined");
    Tensor h = t.device().is_cpu() ? t : t.cpu();
    if (!h.is_contiguous()) h = h.contiguous();
    order.push_back({name, std::move(h)});
  }
  std::stable_sort(order.begin(), order.end(), [](const Planned& a, const Planned& b) {
    return a.host.element_size() > b.host.element_size();
  });
  json header = json::object();
  uint64_t offset = 0;
  for (Planned& p : order) {
    p.begin = offset;
    p.end = offset + static_cast<uint64_t>(p.host.nbytes());
    offset = p.end;
    header[p.name] = {{"dtype", code_of(p.host.dtype())},
                      {"shape", p.host.sizes().vec()},
                      {"data_offsets", {p.begin, p.end}}};
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    EMBER_FAIL("save_tensors: a tensor name or metadata string is not valid UTF-8 (", e.what(),
               ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  out += text;
  return out;
}

// ---- reading --------------------------------------------------------------------------------

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

class Reader {
 public:
  Reader(const void* data, size_t size, const std::string& source)
      : p_(static_cast<const char*>(data)), size_(size), source_(source) {}

  TensorFile parse() {
    if (size_ < 8) fail("the file is ", size_, " bytes, too short for the 8-byte header length");
    uint64_t n = 0;
    std::memcpy(&n, p_, 8);
    if (n > size_ - 8)
      fail("the header length ", n, " exceeds the ", size_ - 8,
           " bytes that follow it (truncated, or not a safetensors file)");
    json header;
    // nlohmann keeps the last of two equal keys; a header naming a tensor (or a field) twice is
    // ambiguous, so the parser's key events are watched for repeats in each object.
    std::vector<std::set<std::string>> open_objects;
    std::optional<std::string> duplicate;
    const json::parser_callback_t watch = [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) {
        open_objects.emplace_back();
      } else if (event == json::parse_event_t::object_end) {
        open_objects.pop_back();
      } else if (event == json::parse_event_t::key && !duplicate) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second) duplicate = key;
      }
      return true;
    };
    try {
      header = json::parse(p_ + 8, p_ + 8 + n, watch);
    } catch (const json::exception& e) {
      fail("the header is not valid JSON (", e.what(), ")");
    }
    if (duplicate) fail("the header has the key '", *duplicate, "' twice");
    if (!header.is_object()) fail("the header must be a JSON object, got ", header.type_name());
    data_ = p_ + 8 + n;
    data_size_ = size_ - 8 - n;

    TensorFile out;
    std::vector<Entry> entries;
    for (const auto& [key, value] : header.items()) {
      if (key == kMetadataKey) {
        read_metadata(value, out.metadata);
      } else {
        entries.push_back(read_entry(key, value));
      }
    }
    check_coverage(entries);
    for (const Entry& e : entries) {
      const char* bytes = data_ + e.begin;
      if (e.dtype == kBool) {
        for (uint64_t i = 0; i < e.end - e.begin; ++i)
          if (static_cast<unsigned char>(bytes[i]) > 1)
            fail("tensor '", e.name, "': BOOL byte ", i, " is ",
                 static_cast<int>(static_cast<unsigned char>(bytes[i])), ", not 0 or 1");
      }
      out.tensors.emplace(e.name, from_blob_copy(bytes, e.shape, e.dtype, Device::cpu()));
    }
    return out;
  }

 private:
  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    EMBER_FAIL("safetensors: ", source_, ": ", args...);
  }

  void read_metadata(const json& value, Metadata& out) const {
    if (!value.is_object()) fail("'", kMetadataKey, "' must be an object of strings");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string()) fail("metadata '", k, "' must be a string, got ", v.type_name());
      out.emplace(k, v.get<std::string>());
    }
  }

  uint64_t read_uint(const json& v, const std::string& name, const char* what) const {
    if (!v.is_number_unsigned())
      fail("tensor '", name, "': ", what, " must be non-negative integers, got ", v.dump());
    return v.get<uint64_t>();
  }

  Entry read_entry(const std::string& name, const json& v) const {
    if (!v.is_object()) fail("tensor '", name, "': expected an object, got ", v.type_name());
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || sh == v.end() || off == v.end())
      fail("tensor '", name, "': needs \"dtype\", \"shape\" and \"data_offsets\"");
    if (!dt->is_string()) fail("tensor '", name, "': dtype must be a string");
    Entry e;
    e.name = name;
    const std::string code = dt->get<std::string>();
    const auto dtype = dtype_of(code);
    if (!dtype)
      fail("tensor '", name, "': unknown dtype '", code,
           "' (supported: F32, F64, F16, BF16, I32, I64, BOOL)");
    e.dtype = *dtype;
    if (!sh->is_array()) fail("tensor '", name, "': shape must be an array");
    if (sh->size() > static_cast<size_t>(kMaxDims))
      fail("tensor '", name, "': ", sh->size(), " dims, the most supported is ", kMaxDims);
    // numel = product of the dims; the product of the non-zero ones must still fit, so a
    // hostile shape cannot overflow what later code computes from it.
    uint64_t nonzero = 1;
    bool empty = false;
    for (const json& d : *sh) {
      const uint64_t x = read_uint(d, name, "shape dims");
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (x != 0 && __builtin_mul_overflow(nonzero, x, &nonzero)) ||
          nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail("tensor '", name, "': shape ", sh->dump(), " is too large");
      empty = empty || x == 0;
      e.shape.push_back(static_cast<int64_t>(x));
    }
    const uint64_t numel = empty ? 0 : nonzero;
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(element_size(e.dtype)), &nbytes))
      fail("tensor '", name, "': shape ", sh->dump(), " is too large");
    if (!off->is_array() || off->size() != 2)
      fail("tensor '", name, "': data_offsets must be [begin, end], got ", off->dump());
    e.begin = read_uint((*off)[0], name, "data_offsets");
    e.end = read_uint((*off)[1], name, "data_offsets");
    if (e.end < e.begin)
      fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end > data_size_)
      fail("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] run past the ",
           data_size_, "-byte data section (truncated file?)");
    if (e.end - e.begin != nbytes)
      fail("tensor '", name, "': ", code, " ", e.shape, " needs ", nbytes,
           " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
    return e;
  }

  // The tensors must tile the data section exactly: no overlap, no gap, nothing left over.
  void check_coverage(std::vector<Entry>& entries) const {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    const Entry* prev = nullptr;
    for (const Entry& e : entries) {
      if (e.begin < at)
        fail("tensor '", e.name, "' [", e.begin, ", ", e.end, ") overlaps tensor '", prev->name,
             "' [", prev->begin, ", ", prev->end, ")");
      if (e.begin > at)
        fail("bytes [", at, ", ", e.begin, ") of the data section belong to no tensor (before '",
             e.name, "')");
      at = e.end;
      prev = &e;
    }
    if (at != data_size_)
      fail("the data section has ", data_size_, " bytes but the tensors cover ", at);
  }

  const char* p_;
  size_t size_;
  const std::string& source_;
  const char* data_ = nullptr;
  uint64_t data_size_ = 0;
};

}  // namespace

// ---- public API -----------------------------------------------------------------------------

std::string to_safetensors(const TensorMap& tensors, const Metadata& metadata) {
  std::vector<Planned> order;
  std::string out = plan(tensors, metadata, order);
  for (const Planned& p : order)
    out.append(static_cast<const char*>(p.host.raw_data()), p.end - p.begin);
  return out;
}

TensorFile from_safetensors(const void* data, size_t size, const std::string& source) {
  return Reader(data, size, source).parse();
}

void save_tensors(const TensorMap& tensors, const std::string& path, const Metadata& metadata) {
  std::vector<Planned> order;
  const std::string head = plan(tensors, metadata, order);
  AtomicFile file(path, "save_tensors");
  file.write(head.data(), head.size());
  for (const Planned& p : order) file.write(p.host.raw_data(), p.end - p.begin);
  file.commit();
}

TensorFile load_tensor_file(const std::string& path) {
  const std::string bytes = read_file(path, "load_tensors");
  return from_safetensors(bytes.data(), bytes.size(), path);
}

TensorMap load_tensors(const std::string& path) { return load_tensor_file(path).tensors; }

namespace {
NamedList<Tensor> state_of(const Module& module) {
  NamedList<Tensor> all = module.named_parameters();
  for (auto& nb : module.named_buffers()) all.push_back(std::move(nb));
  return all;
}
}  // namespace

void save(const Module& module, const std::string& path) {
  TensorMap tensors;
  for (const auto& [name, t] : state_of(module)) tensors.emplace(name, t);
  save_tensors(tensors, path);
}

void load(Module& module, const std::string& path) {
  const TensorFile file = load_tensor_file(path);
  const NamedList<Tensor> targets = state_of(module);
  std::string missing, unexpected, mismatched;
  auto append = [](std::string& list, const std::string& item) {
    list += (list.empty() ? "" : ", ") + item;
  };
  for (const auto& [name, t] : targets) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      append(missing, name);
      continue;
    }
    const Tensor& src = it->second;
    if (src.sizes() != t.sizes() || src.dtype() != t.dtype()) {
      std::ostringstream os;
      os << "'" << name << "' is " << dtype_name(src.dtype()) << " " << src.sizes()
         << " in the file, " << dtype_name(t.dtype()) << " " << t.sizes() << " in the module";
      append(mismatched, os.str());
    }
  }
  std::set<std::string> names;
  for (const auto& nt : targets) names.insert(nt.first);
  for (const auto& [name, t] : file.tensors)
    if (!names.count(name)) append(unexpected, name);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::ostringstream os;
    os << "load: " << path << " does not match module " << module.name() << ":";
    if (!missing.empty()) os << " missing keys: " << missing << ";";
    if (!unexpected.empty()) os << " unexpected keys: " << unexpected << ";";
    if (!mismatched.empty()) os << " mismatched: " << mismatched << ";";
    std::string msg = os.str();
    msg.pop_back();
    throw Error(msg);
  }
  NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    Tensor dst = t;
    dst.copy_(file.tensors.at(name));
  }
}

}  // namespace ember::nn
