#include "data/readers.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/factory.h"

#ifdef EMBER_HAVE_ZLIB
#include <zlib.h>
#endif

namespace ember::data {
namespace {

bool is_gzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

std::string gunzip(const std::string& in, const std::string& path) {
#ifdef EMBER_HAVE_ZLIB
  z_stream z{};
  EMBER_CHECK(inflateInit2(&z, 15 + 32) == Z_OK, "read ", path, ": zlib failed to start");
  std::string out;
  char buf[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string why = z.msg ? z.msg : "truncated or corrupt data";
      inflateEnd(&z);
      EMBER_FAIL("read ", path, ": not valid gzip data (", why, ")");
    }
    out.append(buf, sizeof buf - z.avail_out);
    if (rc != Z_STREAM_END && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      EMBER_FAIL("read ", path, ": the gzip stream ends early");
    }
  }
  inflateEnd(&z);
  return out;
#else
  (void)in;
  EMBER_FAIL("read ", path, ": the file is gzip'd and this Ember was built without zlib");
#endif
}

uint32_t big_endian_u32(const std::string& b, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(b[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3]));
}

}  // namespace

std::string read_file_maybe_gzip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EMBER_CHECK(f.good(), "read ", path, ": cannot open (", std::strerror(errno), ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string bytes = ss.str();
  return is_gzip(bytes) ? gunzip(bytes, path) : bytes;
}

Tensor read_csv(const std::string& path, const CsvOptions& o) {
  const std::string text = read_file_maybe_gzip(path);
  std::vector<double> values;
  int64_t columns = -1, rows = 0, line_no = 0;
  size_t at = 0;
  bool skip = o.header;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (skip) {
      skip = false;
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    int64_t col = 0;
    size_t p = 0;
    while (true) {
      size_t q = line.find(o.delimiter, p);
      if (q == std::string::npos) q = line.size();
      const std::string field = line.substr(p, q - p);
      char* stop = nullptr;
      errno = 0;
      const double v = std::strtod(field.c_str(), &stop);
      bool ok = stop != field.c_str() && errno != ERANGE;
      for (const char* c = stop; ok && *c; ++c) ok = *c == ' ' || *c == '\t';
      EMBER_CHECK(ok, "read_csv ", path, ": line ", line_no, ", column ", col + 1, ": '", field,
                  "' is not a number");
      values.push_back(v);
      ++col;
      if (q == line.size()) break;
      p = q + 1;
    }
    if (columns < 0) columns = col;
    EMBER_CHECK(col == columns, "read_csv ", path, ": line ", line_no, " has ", col,
                " columns, the first row has ", columns);
    ++rows;
  }
  if (columns < 0) columns = 0;
  return from_vector<double>(values, {rows, columns}, TensorOptions(kFloat64)).to(o.dtype);
}

Tensor read_idx(const std::string& path, DType dtype) {
  const std::string b = read_file_maybe_gzip(path);
  EMBER_CHECK(b.size() >= 4 && b[0] == 0 && b[1] == 0, "read_idx ", path,
              ": not an IDX file (the magic number's first two bytes must be 0)");
  const unsigned char type = static_cast<unsigned char>(b[2]);
  const int dims = static_cast<unsigned char>(b[3]);
  int width = 0;
  switch (type) {
    case 0x08:  // unsigned byte
    case 0x09:  // signed byte
      width = 1;
      break;
    case 0x0B:  // short
      width = 2;
      break;
    case 0x0C:  // int
    case 0x0D:  // float
      width = 4;
      break;
    case 0x0E:  // double
      width = 8;
      break;
    default:
      EMBER_FAIL("read_idx ", path, ": unknown element type 0x", std::hex, static_cast<int>(type));
  }
  EMBER_CHECK(dims >= 1 && b.size() >= 4 + 4 * static_cast<size_t>(dims), "read_idx ", path,
              ": the header is cut short (", dims, " dimensions)");
  Shape shape;
  int64_t count = 1;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(static_cast<int64_t>(big_endian_u32(b, 4 + 4 * static_cast<size_t>(d))));
    count *= shape.back();
  }
  const size_t header = 4 + 4 * static_cast<size_t>(dims);
  const size_t need = header + static_cast<size_t>(count) * static_cast<size_t>(width);
  EMBER_CHECK(b.size() == need, "read_idx ", path, ": ", b.size(), " bytes, but the header (",
              shape, " of ", width, "-byte values) asks for ", need);
  std::vector<double> v(static_cast<size_t>(count));
  const unsigned char* p = reinterpret_cast<const unsigned char*>(b.data()) + header;
  for (int64_t i = 0; i < count; ++i, p += width) {
    uint64_t raw = 0;
    for (int k = 0; k < width; ++k) raw = (raw << 8) | p[k];  // big-endian
    switch (type) {
      case 0x08:
        v[i] = static_cast<double>(raw);
        break;
      case 0x09:
        v[i] = static_cast<double>(static_cast<int8_t>(raw));
        break;
      case 0x0B:
        v[i] = static_cast<double>(static_cast<int16_t>(raw));
        break;
      case 0x0C:
        v[i] = static_cast<double>(static_cast<int32_t>(raw));
        break;
      case 0x0D: {
        const uint32_t u = static_cast<uint32_t>(raw);
        float f;
        std::memcpy(&f, &u, 4);
        v[i] = f;
        break;
      }
      default: {
        double d;
        std::memcpy(&d, &raw, 8);
        v[i] = d;
      }
    }
  }
  return from_vector<double>(v, shape, TensorOptions(kFloat64)).to(dtype);
}

}  // namespace ember::data
