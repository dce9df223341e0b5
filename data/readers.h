#pragma once
/// \file
/// Readers for data on disk: CSV text (optionally gzip'd) and the IDX format MNIST ships in
/// (optionally gzip'd).
///
/// A gzip'd file is recognised by its magic bytes, not by its name; reading one needs a build
/// with zlib (EMBER_HAVE_ZLIB), else it is an ember::Error saying so. Every problem (a missing
/// file, a ragged row, text that is not a number, a bad IDX header, a short file) is an
/// ember::Error naming the file and, for CSV, the line and column.
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ember::data {

/// Options of read_csv.
struct CsvOptions {
  char delimiter = ',';    ///< the field separator
  bool header = false;     ///< skip the first line
  DType dtype = kFloat32;  ///< the result's dtype
};

/// A [rows, columns] tensor of `dtype` on the CPU; every row must have the same column count.
/// Blank lines are skipped.
///
/// Every field must be a number (as strtod reads it, surrounding blanks allowed; no quoting,
/// no empty fields). Values are parsed as float64, then converted to `dtype`. Lines may end in
/// `\n` or `\r\n`.
Tensor read_csv(const std::string& path, const CsvOptions& options = {});

/// The IDX file's array, shaped as the file says (MNIST images: [60000, 28, 28]), converted to
/// `dtype` on the CPU.
///
/// Reads every IDX element type (unsigned / signed byte, short, int, float, double; big-endian).
/// Values are converted as they are, not scaled: MNIST pixels stay in 0..255.
Tensor read_idx(const std::string& path, DType dtype = kFloat32);

/// The file's bytes, decompressed if it is gzip'd.
std::string read_file_maybe_gzip(const std::string& path);

}  // namespace ember::data
