// Writes the two files tools/check_python_reads_ember.py reads (every dtype, from arange, so
// Python can recompute them; and an nn::Linear). Usage: write_safetensors_for_python A B
#include <ember/ember.h>
using namespace ember;
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: write_safetensors_for_python DTYPES_FILE LINEAR_FILE\n";
    return 2;
  }
  nn::TensorMap m;
  Tensor base = arange(0, 24, 1, TensorOptions(kFloat64)).view({2, 3, 4}) * 0.25 - 2.0;
  m["f32"] = base.to(kFloat32);
  m["f64"] = base;
  m["f16"] = base.to(kFloat16);
  m["bf16"] = base.to(kBFloat16);
  m["i32"] = (base * 4).to(kInt32);
  m["i64"] = (base * 4).to(kInt64) * 1000000000LL;
  m["bool"] = base > 0.0;
  m["scalar"] = scalar_tensor(3.5);
  m["strided"] = base.to(kFloat32).transpose(0, 2);  // saved contiguous in its logical order
  nn::save_tensors(m, argv[1], {{"writer", "ember"}});
  manual_seed(7);
  nn::Linear lin(4, 3);
  nn::save(lin, argv[2]);
  return 0;
}
