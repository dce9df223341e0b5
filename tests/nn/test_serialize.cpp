// safetensors: round trips of every dtype, byte buffers written by hand from the format's
// description, every kind of corruption (and exhaustive truncation / byte flips) as
// ember::Error, module and optimizer state save/load.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <numbers>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "nn/holder.h"
#include "nn/module.h"
#include "nn/serialize.h"
#include "optim/serialize.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;
namespace fs = std::filesystem;
using Vec = std::vector<double>;

namespace {

// A fresh directory removed with everything in it at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("ember_serialize_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The 8-byte little-endian length, written out byte by byte.
std::string le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s;
}
std::string file_with(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// A tensor's raw bytes (row-major), read by walking its storage on the host.
std::string raw_bytes(const Tensor& t) {
  const Tensor h = t.is_cuda() ? t.cpu() : t;
  REQUIRE(h.is_contiguous());
  return std::string(static_cast<const char*>(h.raw_data()), static_cast<size_t>(h.nbytes()));
}

// One tensor per dtype, with awkward values (NaN, infinities, -0, extremes) and shapes
// (scalar, zero-size, several dims).
nn::TensorMap every_dtype() {
  const double inf = std::numeric_limits<double>::infinity();
  nn::TensorMap m;
  m["f32"] = test::make({1.5, -0.0, inf, std::nan(""), 3.0e38, 1e-40}, {2, 3}, kFloat32);
  m["f64"] = test::make({std::numbers::pi, -inf, 1e-310}, {3}, kFloat64);
  m["f16"] = test::make({0.5, -65504, 6e-8, inf}, {2, 1, 2}, kFloat16);
  m["bf16"] = test::make({1.0, -3.0e38, std::nan("")}, {3}, kBFloat16);
  m["i32"] = test::make({2147483647.0, -2147483648.0, 0, 7}, {4}, kInt32);
  m["i64"] = test::make({-9007199254740992.0, 9007199254740992.0}, {1, 2}, kInt64);
  m["bool"] = test::make({1, 0, 0, 1, 1}, {5}, kBool);
  m["scalar"] = test::make({42.0}, {}, kFloat32);
  m["empty"] = test::make({}, {0, 3}, kFloat64);
  return m;
}

void check_same(const nn::TensorMap& got, const nn::TensorMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(got.count(name));
    const Tensor& g = got.at(name);
    CHECK(g.dtype() == t.dtype());
    CHECK(g.sizes() == t.sizes());
    CHECK(g.device().is_cpu());
    CHECK(raw_bytes(g) == raw_bytes(t));
  }
}

// load_tensors must fail with an ember::Error naming the file and `problem`.
void expect_corrupt(const TempDir& dir, const std::string& bytes, const std::string& problem) {
  const std::string path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  INFO("expected error: " << problem);
  try {
    nn::load_tensors(path);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(problem) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype", "[nn][serialize]") {
  TempDir dir;
  const nn::TensorMap tensors = every_dtype();
  const nn::Metadata meta = {{"format", "pt"}, {"note", "ünïcödé ok"}};
  const std::string path = dir / "all.safetensors";
  nn::save_tensors(tensors, path, meta);
  const nn::TensorFile f = nn::load_tensor_file(path);
  check_same(f.tensors, tensors);
  CHECK(f.metadata == meta);
  check_same(nn::load_tensors(path), tensors);

  // The file obeys the layout rules: header length multiple of 8, every tensor aligned to its
  // element size within the data section.
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  CHECK(n % 8 == 0);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = info["data_offsets"][0];
    CHECK(begin % static_cast<uint64_t>(tensors.at(name).element_size()) == 0);
  }
  // In memory, the same bytes.
  CHECK(nn::to_safetensors(tensors, meta) == bytes);
  check_same(nn::from_safetensors(bytes.data(), bytes.size(), "mem").tensors, tensors);
}

TEST_CASE("safetensors writes views and device tensors contiguous", "[nn][serialize]") {
  TempDir dir;
  Tensor base = test::make({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat32);
  nn::save_tensors({{"t", base.t()}, {"row", base.select(0, 1)}}, dir / "v.safetensors");
  const nn::TensorMap m = nn::load_tensors(dir / "v.safetensors");
  CHECK(test::read(m.at("t")) == Vec{1, 4, 2, 5, 3, 6});
  CHECK(m.at("t").sizes() == Shape{3, 2});
  CHECK(test::read(m.at("row")) == Vec{4, 5, 6});
}

TEST_CASE("safetensors writer output matches the format byte for byte", "[nn][serialize]") {
  const std::string header = R"({"x":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})";
  std::string padded = header;
  while (padded.size() % 8) padded += ' ';
  // 1.0f = 0x3f800000, 2.0f = 0x40000000, little-endian.
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  CHECK(nn::to_safetensors({{"x", test::make({1, 2}, {2}, kFloat32)}}) == file_with(padded, data));
}

TEST_CASE("safetensors parses a buffer built by hand from the format description",
          "[nn][serialize]") {
  TempDir dir;
  // Two tensors stored in the opposite order of their names, metadata, no padding (the header
  // length is not a multiple of 8: readers must not require it).
  const std::string header = R"({"b":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
                             R"("h":{"dtype":"F16","shape":[],"data_offsets":[24,26]},)"
                             R"("__metadata__":{"framework":"pt"}})";
  std::string data;
  data += le64(3);                             // b[0] = 3
  data += std::string(8, '\xff');              // b[1] = -1
  data += std::string("\x00\x00\xc0\x3f", 4);  // a[0] = 1.5f
  data += std::string("\x00\x00\x00\xc0", 4);  // a[1] = -2.0f
  data += std::string("\x00\x3c", 2);          // h = 1.0 (binary16 0x3c00)
  for (const std::string& pad : {std::string(), std::string(7, ' ')}) {
    const std::string path = dir / "hand.safetensors";
    write_bytes(path, file_with(header + pad, data));
    const nn::TensorFile f = nn::load_tensor_file(path);
    REQUIRE(f.tensors.size() == 3);
    CHECK(f.tensors.at("a").dtype() == kFloat32);
    CHECK(f.tensors.at("a").sizes() == Shape{2});
    CHECK(test::read(f.tensors.at("a")) == Vec{1.5, -2.0});
    CHECK(f.tensors.at("b").dtype() == kInt64);
    CHECK(f.tensors.at("b").sizes() == Shape{1, 2});
    CHECK(test::read(f.tensors.at("b")) == Vec{3, -1});
    CHECK(f.tensors.at("h").dtype() == kFloat16);
    CHECK(f.tensors.at("h").dim() == 0);
    CHECK(test::read(f.tensors.at("h")) == Vec{1.0});
    CHECK(f.metadata == nn::Metadata{{"framework", "pt"}});
  }
  // The smallest valid file: an empty header object.
  write_bytes(dir / "empty.safetensors", file_with("{}", ""));
  CHECK(nn::load_tensors(dir / "empty.safetensors").empty());
}

TEST_CASE("safetensors corruption is an ember::Error naming the file and the problem",
          "[nn][serialize]") {
  TempDir dir;
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\x01');
  expect_corrupt(dir, "", "too short");
  expect_corrupt(dir, std::string(7, '\0'), "too short");
  expect_corrupt(dir, le64(100) + "{}", "exceeds");
  expect_corrupt(dir, le64(~0ull) + "{}", "exceeds");
  expect_corrupt(dir, file_with(R"({"a":)", ""), "not valid JSON");
  expect_corrupt(dir, file_with("{}\x01", ""), "not valid JSON");
  expect_corrupt(dir, file_with("[1,2]", ""), "must be a JSON object");
  expect_corrupt(dir, file_with(R"({"a":5})", ""), "expected an object");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "data_offsets");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight),
                 "unknown dtype 'U8'");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":7,"shape":[8],"data_offsets":[0,8]}})", eight),
                 "dtype must be a string");
  expect_corrupt(dir,
                 file_with(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
                 "non-negative integers");
  expect_corrupt(dir,
                 file_with(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", eight),
                 "non-negative integers");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight),
                 "shape must be an array");
  expect_corrupt(
      dir,
      file_with(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})", eight),
      "dims");
  expect_corrupt(
      dir,
      file_with(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
                eight),
      "too large");
  expect_corrupt(dir,
                 file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", eight),
                 "run past");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
                 "end before");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
                 "[begin, end]");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
                 "needs 12 bytes");
  expect_corrupt(
      dir,
      file_with("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                eight),
      "overlaps");
  expect_corrupt(dir, file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
                 "belong to no tensor");
  expect_corrupt(dir, file_with("{" + ok_entry + "}", eight + "xx"), "the tensors cover 8");
  expect_corrupt(dir, file_with(R"({"__metadata__":{"k":1}})", ""), "must be a string");
  expect_corrupt(dir, file_with(R"({"__metadata__":[]})", ""), "object of strings");
  expect_corrupt(dir,
                 file_with(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                           std::string("\x01\x02", 2)),
                 "not 0 or 1");
  // A valid file cut short.
  const std::string good = nn::to_safetensors(every_dtype());
  expect_corrupt(dir, good.substr(0, good.size() - 1), "run past");
  // Not a file at all.
  CHECK_THROWS_WITH(nn::load_tensors(dir / "missing.safetensors"),
                    Catch::Contains("cannot open") && Catch::Contains("missing.safetensors"));
  CHECK_THROWS_WITH(nn::load_tensors(dir.path.string()), Catch::Contains("not a regular file"));
}

TEST_CASE("safetensors rejects a header that names a key twice", "[nn][serialize]") {
  TempDir dir;
  const std::string four(4, '\x01');
  // JSON parsers keep one of two equal keys; which tensor "a" would be is ambiguous.
  expect_corrupt(dir,
                 file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                           four),
                 "the key 'a' twice");
  // A repeated field inside one entry, and inside the metadata.
  expect_corrupt(
      dir, file_with(R"({"w":{"dtype":"F32","shape":[1],"shape":[2],"data_offsets":[0,4]}})", four),
      "the key 'shape' twice");
  expect_corrupt(dir, file_with(R"({"__metadata__":{"k":"1","k":"2"}})", ""), "the key 'k' twice");
  expect_corrupt(dir, file_with(R"({"__metadata__":{},"__metadata__":{}})", ""),
                 "the key '__metadata__' twice");
  // Equal keys in different objects are not duplicates.
  const std::string bytes = file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                      R"("__metadata__":{"a":"x","dtype":"y"}})",
                                      four);
  const nn::TensorFile f = nn::from_safetensors(bytes.data(), bytes.size(), "memory");
  CHECK(f.tensors.size() == 1);
  CHECK(f.metadata.at("a") == "x");
}

TEST_CASE("safetensors refuses a FIFO without waiting for a writer", "[nn][serialize]") {
  TempDir dir;
  const std::string path = dir / "fifo.safetensors";
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  auto pending = std::async(std::launch::async, [&] {
    try {
      nn::load_tensors(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the reader (opening the write side completes its open; closing gives it EOF) so
    // the test ends, then fail.
    for (int i = 0;
         i < 100 && pending.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready;
         ++i) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    pending.wait();
    FAIL("load_tensors blocked on a FIFO");
  }
  CHECK_THAT(pending.get(), Catch::Contains("not a regular file") && Catch::Contains(path));
}

TEST_CASE("safetensors never reads past the buffer: every truncation and byte flip",
          "[nn][serialize]") {
  const std::string good = nn::to_safetensors(every_dtype(), {{"k", "v"}});
  // Every strict prefix is invalid (the data section must be covered exactly). Each is parsed
  // from a heap block of exactly its size, so a sanitizer build catches any over-read.
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<char> block(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(nn::from_safetensors(block.data(), block.size(), "prefix"), Error);
  }
  // Flipping bytes anywhere gives either a clean error or a successful parse, never anything else.
  std::mt19937 rng(99);
  const size_t header_end = 8 + 600 < good.size() ? 8 + 600 : good.size();
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<char> block(good.begin(), good.end());
    const size_t pos = trial < 2000 ? rng() % header_end : rng() % block.size();
    block[pos] = static_cast<char>(rng() & 0xff);
    try {
      nn::from_safetensors(block.data(), block.size(), "flip");
    } catch (const Error&) {
    } catch (const std::exception& e) {
      FAIL("byte " << pos << " flipped: unexpected exception " << e.what());
    }
  }
}

TEST_CASE("safetensors writes atomically", "[nn][serialize]") {
  TempDir dir;
  const std::string path = dir / "w.safetensors";
  nn::save_tensors({{"a", test::make({1, 2}, {2}, kFloat32)}}, path);
  const std::string before = read_bytes(path);
  // A failing save leaves the old file untouched and no temporary behind.
  CHECK_THROWS_AS(nn::save_tensors({{"a", Tensor()}}, path), Error);
  CHECK_THROWS_AS(nn::save_tensors({{"__metadata__", test::make({1}, {1}, kFloat32)}}, path),
                  Error);
  CHECK(read_bytes(path) == before);
  // Overwriting replaces the file whole.
  nn::save_tensors({{"b", test::make({3, 4, 5}, {3}, kFloat64)}}, path);
  const nn::TensorMap m = nn::load_tensors(path);
  CHECK(m.size() == 1);
  CHECK(test::read(m.at("b")) == Vec{3, 4, 5});
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
  CHECK_THROWS_WITH(nn::save_tensors({}, dir / "no_such_dir/x.safetensors"),
                    Catch::Contains("no_such_dir"));
}

// ---- modules --------------------------------------------------------------------------------

namespace {

struct LeafImpl : nn::Module {
  Tensor w;
  explicit LeafImpl(double base) {
    w = register_parameter("w", test::make({base, -base}, {2}, kFloat32));
  }
};

struct ToyImpl : nn::Module {
  Tensor weight, bias, running;
  std::shared_ptr<LeafImpl> child;
  explicit ToyImpl(double base, Shape wshape = {2, 3}, DType bias_dtype = kFloat32) {
    Vec w(static_cast<size_t>(numel_of(wshape)));
    for (size_t i = 0; i < w.size(); ++i) w[i] = base + static_cast<double>(i);
    weight = register_parameter("weight", test::make(w, wshape, kFloat32));
    bias = register_parameter("bias", test::make({base, base * 2, base * 3}, {3}, bias_dtype));
    running = register_buffer("running", test::make({base / 2, base / 4}, {2}, kFloat64));
    child = register_module("child", std::make_shared<LeafImpl>(base));
  }
};

EMBER_MODULE(Toy);

}  // namespace

TEST_CASE("module save/load through holders", "[nn][serialize]") {
  TempDir dir;
  Toy a(1.0), b(4.0);
  nn::save(a, dir / "toy.safetensors");
  nn::load(b, dir / "toy.safetensors");
  CHECK(test::read(b->weight) == test::read(a->weight));
  CHECK(test::read(b->child->w) == test::read(a->child->w));
  Toy empty{nullptr};
  CHECK_THROWS_AS(nn::load(empty, dir / "toy.safetensors"), Error);
}

TEST_CASE("module save/load round trip keeps tensor identity", "[nn][serialize]") {
  TempDir dir;
  const std::string path = dir / "toy.safetensors";
  ToyImpl a(1.0);
  nn::save(a, path);
  const nn::TensorMap file = nn::load_tensors(path);
  CHECK(file.size() == 4);
  CHECK(file.count("weight"));
  CHECK(file.count("bias"));
  CHECK(file.count("running"));
  CHECK(file.count("child.w"));

  ToyImpl b(10.0);
  const Tensor weight_handle = b.weight;
  const void* weight_data = b.weight.raw_data();
  nn::load(b, path);
  CHECK(test::read(b.weight) == test::read(a.weight));
  CHECK(test::read(b.bias) == test::read(a.bias));
  CHECK(test::read(b.running) == test::read(a.running));
  CHECK(test::read(b.child->w) == test::read(a.child->w));
  // Written in place: the same tensor, the same memory, still a leaf that requires grad.
  CHECK(b.weight.is_same(weight_handle));
  CHECK(b.weight.raw_data() == weight_data);
  CHECK(b.weight.requires_grad());
  CHECK(b.weight.is_leaf());
}

TEST_CASE("module load reports every mismatch and changes nothing", "[nn][serialize]") {
  TempDir dir;
  const std::string path = dir / "toy.safetensors";
  ToyImpl a(1.0);
  nn::save(a, path);

  auto expect_mismatch = [&](nn::Module& m, const std::vector<std::string>& parts) {
    const nn::TensorMap before = [&] {
      nn::TensorMap s;
      for (const auto& [n, t] : m.named_parameters()) s[n] = t.clone();
      return s;
    }();
    try {
      nn::load(m, path);
      FAIL("no error");
    } catch (const Error& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(path) != std::string::npos);
      for (const std::string& p : parts) CHECK(msg.find(p) != std::string::npos);
    }
    for (const auto& [n, t] : m.named_parameters())
      CHECK(test::read(t) == test::read(before.at(n)));
  };

  struct Extra : ToyImpl {
    Extra() : ToyImpl(5.0) { register_parameter("extra", test::make({1}, {1}, kFloat32)); }
  } extra;
  expect_mismatch(extra, {"missing keys: extra"});

  LeafImpl leaf(3.0);  // has only "w": everything in the file is unexpected, "w" is missing
  expect_mismatch(leaf, {"missing keys: w", "unexpected keys: bias, child.w, running, weight"});

  ToyImpl shape(5.0, {3, 2});
  expect_mismatch(shape, {"'weight'", "[2, 3] in the file", "[3, 2] in the module"});

  ToyImpl dtype(5.0, {2, 3}, kFloat64);
  expect_mismatch(dtype, {"'bias'", "float32", "float64"});

  // A file that is not safetensors at all.
  write_bytes(path, "garbage, not weights");
  ToyImpl c(2.0);
  CHECK_THROWS_WITH(nn::load(c, path), Catch::Contains(path));
}

// ---- optimizer state --------------------------------------------------------------------------

namespace {

// "p0", "p1", ... (appended, not "p" + to_string: GCC 12 warns falsely on that under -O3).
std::string param_name(size_t i) {
  std::string s = "p";
  s += std::to_string(i);
  return s;
}

std::vector<Tensor> make_params(double base) {
  return {test::make({base, 2 * base, -base, 0.5, 0.25, -3}, {2, 3}, kFloat32).requires_grad_(),
          test::make({base, -1, 1}, {3}, kFloat32).requires_grad_(),
          test::make({0.5, base}, {2}, kFloat64).requires_grad_()};
}

optim::SGD make_sgd(const std::vector<Tensor>& p, double lr, double momentum) {
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(
      std::vector<Tensor>{p[0], p[1]},
      optim::SGDOptions(lr).momentum(momentum).nesterov(momentum > 0).weight_decay(0.01));
  groups.emplace_back(std::vector<Tensor>{p[2]},
                      optim::SGDOptions(lr * 2).momentum(momentum / 2).dampening(0.2));
  return optim::SGD(groups, optim::SGDOptions(1.0));
}

// Deterministic gradients for step `step`; parameter 2 gets none before step 4.
void set_grads(std::vector<Tensor>& p, int step) {
  std::mt19937 rng(static_cast<unsigned>(1000 + step));
  std::normal_distribution<double> dist;
  for (size_t i = 0; i < p.size(); ++i) {
    if (i == 2 && step < 4) {
      p[i].set_grad(Tensor());
      continue;
    }
    Vec g(static_cast<size_t>(p[i].numel()));
    for (double& x : g) x = dist(rng);
    p[i].set_grad(test::make(g, p[i].sizes(), p[i].dtype(), p[i].device()));
  }
}

}  // namespace

TEST_CASE("optimizer state round trip continues training identically", "[optim][serialize]") {
  TempDir dir;
  std::vector<Tensor> pa = make_params(1.0);
  optim::SGD a = make_sgd(pa, 0.1, 0.9);
  for (int step = 0; step < 3; ++step) {
    set_grads(pa, step);
    a.step();
  }
  a.set_lr(0, 0.05);
  nn::save_tensors({{"p0", pa[0]}, {"p1", pa[1]}, {"p2", pa[2]}}, dir / "params.safetensors");
  optim::save(a, dir / "opt.safetensors");
  for (int step = 3; step < 7; ++step) {
    set_grads(pa, step);
    a.step();
  }

  // A second optimizer with other options and no history, restored from the files.
  std::vector<Tensor> pb = make_params(7.0);
  const nn::TensorMap saved = nn::load_tensors(dir / "params.safetensors");
  for (size_t i = 0; i < pb.size(); ++i) {
    NoGradGuard no_grad;
    pb[i].copy_(saved.at(param_name(i)));
  }
  optim::SGD b = make_sgd(pb, 1.0, 0.5);
  optim::load(b, dir / "opt.safetensors");
  CHECK(b.get_lr(0) == 0.05);
  CHECK(b.get_lr(1) == 0.2);
  CHECK(b.options(0).momentum() == 0.9);
  CHECK(b.options(0).nesterov());
  CHECK(b.options(1).dampening() == 0.2);
  CHECK(b.steps(0) == 3);
  CHECK(!b.momentum_buffer(1, 0).defined());  // parameter 2 had no gradient yet
  for (int step = 3; step < 7; ++step) {
    set_grads(pb, step);
    b.step();
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO("parameter " << i);
    CHECK(raw_bytes(pb[i]) == raw_bytes(pa[i]));
  }
  CHECK(raw_bytes(b.momentum_buffer(0, 0)) == raw_bytes(a.momentum_buffer(0, 0)));
  CHECK(raw_bytes(b.momentum_buffer(1, 0)) == raw_bytes(a.momentum_buffer(1, 0)));
}

TEST_CASE("optimizer state load rejects a different layout and changes nothing",
          "[optim][serialize]") {
  TempDir dir;
  std::vector<Tensor> pa = make_params(1.0);
  optim::SGD a = make_sgd(pa, 0.1, 0.9);
  set_grads(pa, 0);
  a.step();
  const std::string path = dir / "opt.safetensors";
  optim::save(a, path);

  // One group instead of two.
  std::vector<Tensor> p1 = make_params(1.0);
  optim::SGD one(p1, optim::SGDOptions(0.3));
  CHECK_THROWS_WITH(optim::load(one, path),
                    Catch::Contains(path) && Catch::Contains("parameter groups"));
  CHECK(one.get_lr(0) == 0.3);
  CHECK(one.steps(0) == 0);

  // Same groups, a parameter of another shape.
  std::vector<Tensor> p2 = make_params(1.0);
  p2[1] = test::make({1, 2}, {2}, kFloat32).requires_grad_();
  optim::SGD other = make_sgd(p2, 0.3, 0.5);
  CHECK_THROWS_WITH(optim::load(other, path), Catch::Contains("state.0.1.momentum_buffer"));
  CHECK(other.get_lr(0) == 0.3);
  CHECK(other.options(0).momentum() == 0.5);

  // Weights are not optimizer state.
  nn::save_tensors({{"w", pa[0]}}, dir / "w.safetensors");
  CHECK_THROWS_WITH(optim::load(other, dir / "w.safetensors"), Catch::Contains("optimizer"));

  // Unknown extra tensors, and tampered metadata.
  optim::OptimizerState st = a.state_dict();
  st.tensors["state.0.0.exp_avg"] = pa[0];
  CHECK_THROWS_WITH(a.load_state_dict(st),
                    Catch::Contains("unexpected tensors: state.0.0.exp_avg"));
  st = a.state_dict();
  st.metadata["param_groups.0.nesterov"] = "maybe";
  CHECK_THROWS_WITH(a.load_state_dict(st), Catch::Contains("true or false"));
  st = a.state_dict();
  st.metadata["param_groups.0.nesterov"] = "true";
  st.tensors["param_groups.0.options"] = test::make({0.1, 0.9, 0.5, 0.0}, {4}, kFloat64);
  CHECK_THROWS_WITH(a.load_state_dict(st), Catch::Contains("nesterov"));
}

TEST_CASE("module and optimizer state load onto CUDA tensors", "[nn][serialize][cuda]") {
  EMBER_REQUIRE_CUDA();
  TempDir dir;
  ToyImpl a(1.0);
  nn::save(a, dir / "toy.safetensors");
  ToyImpl b(3.0);
  b.to(Device::cuda(0));
  nn::load(b, dir / "toy.safetensors");
  CHECK(b.weight.is_cuda());
  CHECK(test::read(b.weight) == test::read(a.weight));
  CHECK(test::read(b.running) == test::read(a.running));

  // Optimizer state saved from the GPU resumes on the GPU identically.
  std::vector<Tensor> pa = make_params(1.0);
  for (Tensor& p : pa) p = p.detach().cuda().requires_grad_();
  optim::SGD oa = make_sgd(pa, 0.1, 0.9);
  for (int step = 0; step < 2; ++step) {
    set_grads(pa, step);
    oa.step();
  }
  nn::save_tensors({{"p0", pa[0]}, {"p1", pa[1]}, {"p2", pa[2]}}, dir / "params.safetensors");
  optim::save(oa, dir / "opt.safetensors");
  for (int step = 2; step < 6; ++step) {
    set_grads(pa, step);
    oa.step();
  }
  std::vector<Tensor> pb = make_params(5.0);
  for (Tensor& p : pb) p = p.detach().cuda().requires_grad_();
  const nn::TensorMap saved = nn::load_tensors(dir / "params.safetensors");
  CHECK(saved.at("p0").device().is_cpu());
  for (size_t i = 0; i < pb.size(); ++i) {
    NoGradGuard no_grad;
    pb[i].copy_(saved.at(param_name(i)));
  }
  optim::SGD ob = make_sgd(pb, 1.0, 0.5);
  optim::load(ob, dir / "opt.safetensors");
  CHECK(ob.momentum_buffer(0, 0).is_cuda());
  for (int step = 2; step < 6; ++step) {
    set_grads(pb, step);
    ob.step();
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO("parameter " << i);
    CHECK(raw_bytes(pb[i]) == raw_bytes(pa[i]));
  }
}
