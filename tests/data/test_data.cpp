// data/: TensorDataset, Subset, random_split, DataLoader (batches, short last batch, drop_last,
// shuffle reproducible from manual_seed and a permutation each epoch, prefetch giving the same
// batches as without, an error in the background thread reaching the loop) and the readers
// (CSV plain and gzip'd, IDX of every element type, gzip'd; bad files named with line/column).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/readers.h"
#include "test_util.h"

#ifdef EMBER_HAVE_ZLIB
#include <zlib.h>
#endif

using namespace ember;
using Catch::Matchers::Contains;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ember_test_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes, bool gzip) {
  if (gzip) {
#ifdef EMBER_HAVE_ZLIB
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
    gzclose(f);
    return;
#else
    FAIL("gzip requested without zlib");
#endif
  }
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// x[i] = [i, 10 i], y[i] = i % 3.
std::shared_ptr<data::TensorDataset> numbered(int64_t n) {
  std::vector<double> xv, yv;
  for (int64_t i = 0; i < n; ++i) {
    xv.push_back(static_cast<double>(i));
    xv.push_back(10.0 * i);
    yv.push_back(static_cast<double>(i % 3));
  }
  return std::make_shared<data::TensorDataset>(
      std::vector<Tensor>{test::make(xv, {n, 2}, kFloat32), test::make(yv, {n}, kInt64)});
}

// The sample indices a pass yields (x[:, 0] holds them), batch by batch.
std::vector<std::vector<int64_t>> pass(data::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const std::vector<Tensor>& b : loader) {
    REQUIRE(b.size() == 2);
    std::vector<int64_t> idx;
    const std::vector<double> x = test::read(b[0]), y = test::read(b[1]);
    REQUIRE(x.size() == 2 * y.size());
    for (size_t k = 0; k < y.size(); ++k) {
      const int64_t i = static_cast<int64_t>(x[2 * k]);
      CHECK(x[2 * k + 1] == 10.0 * i);  // the fields of one sample stay together
      CHECK(y[k] == static_cast<double>(i % 3));
      idx.push_back(i);
    }
    out.push_back(idx);
  }
  return out;
}

}  // namespace

TEST_CASE("DataLoader: batches in order, the short last one, drop_last", "[data]") {
  auto ds = numbered(10);
  for (bool prefetch : {false, true}) {
    INFO("prefetch " << prefetch);
    data::DataLoader loader(ds, {.batch_size = 4, .prefetch = prefetch});
    CHECK(loader.size() == 3);
    const auto b = pass(loader);
    REQUIRE(b.size() == 3);
    CHECK(b[0] == std::vector<int64_t>{0, 1, 2, 3});
    CHECK(b[2] == std::vector<int64_t>{8, 9});
    data::DataLoader dropping(ds, {.batch_size = 4, .drop_last = true, .prefetch = prefetch});
    CHECK(dropping.size() == 2);
    CHECK(pass(dropping).size() == 2);
  }
  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 0}), Contains("batch_size"));
  // An empty dataset: no batch.
  data::DataLoader empty(std::make_shared<data::TensorDataset>(std::vector<Tensor>{zeros({0, 2})}),
                         {.batch_size = 3});
  CHECK(empty.size() == 0);
  CHECK(empty.begin() == empty.end());
}

TEST_CASE("DataLoader: shuffle is a permutation per epoch, reproducible from the seed",
          "[data]") {
  auto ds = numbered(23);
  auto epochs = [&](bool prefetch) {
    manual_seed(5);
    data::DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .prefetch = prefetch});
    std::vector<std::vector<int64_t>> orders;
    for (int e = 0; e < 3; ++e) {
      std::vector<int64_t> order;
      for (const auto& b : pass(loader)) order.insert(order.end(), b.begin(), b.end());
      orders.push_back(order);
    }
    return orders;
  };
  const auto a = epochs(true), b = epochs(false);
  CHECK(a == b);  // prefetch changes nothing; the same seed gives the same orders
  std::vector<int64_t> all(23);
  std::iota(all.begin(), all.end(), 0);
  for (const auto& order : a) {
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == all);
  }
  CHECK(a[0] != a[1]);  // a new order each epoch
  CHECK(a[0] != all);
}

TEST_CASE("DataLoader: batches for a CUDA device, staged in pinned memory or not", "[data][cuda]") {
  EMBER_REQUIRE_CUDA();
  auto ds = numbered(37);
  auto epochs = [&](std::optional<Device> device, bool prefetch, bool pin) {
    manual_seed(11);
    data::DataLoader loader(ds, {.batch_size = 5,
                                 .shuffle = true,
                                 .device = device,
                                 .prefetch = prefetch,
                                 .pin_memory = pin});
    std::vector<std::vector<int64_t>> all;
    std::vector<std::vector<Tensor>> kept;  // held past later batches' staging
    for (int e = 0; e < 3; ++e)
      for (const std::vector<Tensor>& b : loader) {
        for (const Tensor& t : b) CHECK(t.device() == (device ? *device : Device::cpu()));
        kept.push_back(b);
      }
    for (const auto& b : kept) {
      std::vector<int64_t> idx;
      const std::vector<double> x = test::read(b[0]), y = test::read(b[1]);
      REQUIRE(x.size() == 2 * y.size());
      for (size_t k = 0; k < y.size(); ++k) {
        const int64_t i = static_cast<int64_t>(x[2 * k]);
        CHECK(x[2 * k + 1] == 10.0 * i);
        CHECK(y[k] == static_cast<double>(i % 3));
        idx.push_back(i);
      }
      all.push_back(idx);
    }
    return all;
  };
  const auto want = epochs(std::nullopt, false, false);
  REQUIRE(want.size() == 24);  // 8 batches (the last of 2) per epoch
  for (bool prefetch : {true, false})
    for (bool pin : {true, false}) {
      INFO("prefetch " << prefetch << ", pin_memory " << pin);
      CHECK(epochs(Device::cuda(0), prefetch, pin) == want);
    }
}

TEST_CASE("DataLoader: an error while gathering reaches the loop, and leaving early is fine",
          "[data]") {
  struct Failing : data::Dataset {
    int64_t size() const override { return 6; }
    std::vector<Tensor> get(int64_t i) const override {
      EMBER_CHECK(i < 4, "Failing: sample ", i, " is unreadable");
      return {full({1}, static_cast<double>(i))};
    }
  };
  data::DataLoader loader(std::make_shared<Failing>(), {.batch_size = 2});
  int seen = 0;
  auto run = [&] {
    for (const auto& b : loader) {
      CHECK(b[0].sizes() == Shape{2, 1});
      ++seen;
    }
  };
  CHECK_THROWS_WITH(run(), Contains("sample 4 is unreadable"));
  CHECK(seen == 2);
  auto ds = numbered(100);
  data::DataLoader big(ds, {.batch_size = 3});
  for (const auto& b : big) {
    CHECK(b[0].size(0) == 3);
    break;  // the epoch's thread stops with the iterator
  }
}

TEST_CASE("TensorDataset, Subset and random_split", "[data]") {
  CHECK_THROWS_WITH(data::TensorDataset({zeros({3, 2}), zeros({4})}), Contains("4 samples"));
  auto ds = numbered(10);
  CHECK(ds->size() == 10);
  CHECK(test::read(ds->get(7)[0]) == std::vector<double>{7, 70});
  CHECK_THROWS_WITH(ds->get(10), Contains("index 10"));
  manual_seed(9);
  const auto parts = data::random_split(ds, std::vector<int64_t>{6, 4});
  REQUIRE(parts.size() == 2);
  CHECK(parts[0]->size() == 6);
  CHECK(parts[1]->size() == 4);
  std::set<int64_t> seen;
  for (const auto& p : parts)
    for (int64_t i : p->indices()) CHECK(seen.insert(i).second);
  CHECK(seen.size() == 10);
  // A subset's batch is the base's samples at its indices.
  const std::vector<Tensor> b = parts[1]->get_batch({0, 3});
  CHECK(test::read(b[0])[0] == static_cast<double>(parts[1]->indices()[0]));
  CHECK(test::read(b[0])[2] == static_cast<double>(parts[1]->indices()[3]));
  const auto thirds = data::random_split(ds, std::vector<double>{0.34, 0.33, 0.33});
  CHECK(thirds[0]->size() + thirds[1]->size() + thirds[2]->size() == 10);
  CHECK(thirds[0]->size() == 4);  // floor gives 3, 3, 3; the remainder goes to the first
  CHECK_THROWS_WITH(data::random_split(ds, std::vector<int64_t>{6, 5}), Contains("sum to 11"));
  CHECK_THROWS_WITH(data::random_split(ds, std::vector<double>{0.5, 0.6}), Contains("sum to"));
  // Braced sizes and fractions pick the same overloads, and draw the same split.
  manual_seed(9);
  const auto braced = data::random_split(ds, {6, 4});
  CHECK(braced[0]->indices() == parts[0]->indices());
  const auto braced_fractions = data::random_split(ds, {0.34, 0.33, 0.33});
  CHECK(braced_fractions[0]->size() == 4);
  CHECK_THROWS_WITH(data::random_split(ds, {6, 5}), Contains("sum to 11"));
}

TEST_CASE("read_csv: plain and gzip'd, header, blank lines, and bad rows named", "[data]") {
  const std::string text = "a,b,c\n1,2.5,-3\n\n4e2, 5 ,6\r\n";
  std::vector<bool> kinds = {false};
#ifdef EMBER_HAVE_ZLIB
  kinds.push_back(true);
#endif
  for (bool gz : kinds) {
    INFO("gzip " << gz);
    const std::string path = temp_path(gz ? "t.csv.gz" : "t.csv");
    write_bytes(path, text, gz);
    const Tensor t = data::read_csv(path, {.header = true, .dtype = kFloat64});
    CHECK(t.sizes() == Shape{2, 3});
    CHECK(test::read(t) == std::vector<double>{1, 2.5, -3, 400, 5, 6});
    std::filesystem::remove(path);
  }
  const std::string path = temp_path("bad.csv");
  write_bytes(path, "1,2\n3,x\n", false);
  CHECK_THROWS_WITH(data::read_csv(path), Contains("line 2, column 2") && Contains("'x'"));
  write_bytes(path, "1,2\n3\n", false);
  CHECK_THROWS_WITH(data::read_csv(path), Contains("line 2 has 1 columns"));
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(data::read_csv(temp_path("missing.csv")), Contains("cannot open"));
}

namespace {

std::string idx_bytes(unsigned char type, const std::vector<uint32_t>& dims,
                      const std::string& payload) {
  std::string b = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<char>((d >> s) & 0xff));
  return b + payload;
}

}  // namespace

TEST_CASE("read_idx: MNIST's format, every element type, gzip'd, and bad files named", "[data]") {
  const std::string path = temp_path("t.idx");
  // ubyte [2, 3]: what MNIST's image files hold.
  write_bytes(path, idx_bytes(0x08, {2, 3}, std::string{0, 1, 2, char(200), char(254), char(255)}),
              false);
  Tensor t = data::read_idx(path);
  CHECK(t.sizes() == Shape{2, 3});
  CHECK(test::read(t) == std::vector<double>{0, 1, 2, 200, 254, 255});
  // signed byte, big-endian short and int, float, double.
  write_bytes(path, idx_bytes(0x09, {2}, std::string{char(-5), 7}), false);
  CHECK(test::read(data::read_idx(path)) == std::vector<double>{-5, 7});
  write_bytes(path, idx_bytes(0x0B, {2}, std::string{char(0xff), char(0xfe), 0x01, 0x00}), false);
  CHECK(test::read(data::read_idx(path)) == std::vector<double>{-2, 256});
  write_bytes(path, idx_bytes(0x0C, {1}, std::string{0, 1, 0, 0}), false);
  CHECK(test::read(data::read_idx(path, kInt64)) == std::vector<double>{65536});
  write_bytes(path, idx_bytes(0x0D, {1}, std::string{0x3f, char(0xc0), 0, 0}), false);  // 1.5f
  CHECK(test::read(data::read_idx(path)) == std::vector<double>{1.5});
  write_bytes(path, idx_bytes(0x0E, {1}, std::string{char(0xc0), 0x04, 0, 0, 0, 0, 0, 0}),
              false);  // -2.5
  CHECK(test::read(data::read_idx(path, kFloat64)) == std::vector<double>{-2.5});
#ifdef EMBER_HAVE_ZLIB
  write_bytes(path, idx_bytes(0x08, {1, 2}, std::string{9, 8}), true);
  CHECK(test::read(data::read_idx(path)) == std::vector<double>{9, 8});
#endif
  write_bytes(path, idx_bytes(0x08, {2, 3}, std::string{1, 2, 3}), false);
  CHECK_THROWS_WITH(data::read_idx(path), Contains("15 bytes") && Contains("asks for 18"));
  write_bytes(path, std::string{1, 2, 8, 1}, false);
  CHECK_THROWS_WITH(data::read_idx(path), Contains("not an IDX file"));
  write_bytes(path, idx_bytes(0x07, {1}, std::string{1}), false);
  CHECK_THROWS_WITH(data::read_idx(path), Contains("unknown element type"));
  std::filesystem::remove(path);
}
