#pragma once
// The device error flag: how a kernel reports bad input (an out-of-range class index) without
// a trap that would kill the CUDA context. Each device has one record in mapped pinned host
// memory (kernels/cuda/runtime.h: device_error_flag); a kernel that finds bad data raises it and
// carries on with a harmless value, and the host checks the record after every synchronize and
// device-to-host copy, where reading it costs nothing, and throws ember::Error. Kernels that
// write lasting state (the optimizer's update, multi_tensor.cuh) check first and change nothing
// while it is raised, so a step that will fail at the next synchronize leaves the model as it
// was. They read `raised`, a word in device memory that raising also sets, not the record: a
// read of host memory from every block of a launch costs a PCIe round trip each.
//
// Host C++, nvcc and NVRTC all include this header.

namespace ember::kernels::cuda {

// What went wrong; the host turns (code, value, limit) into the message after each code.
enum DeviceErrorCode : int {
  kDeviceErrorNone = 0,
  // "cross_entropy: target <value> is out of range for <limit> classes"
  kCrossEntropyTarget = 1,
  // "gather: index <value> is out of range for a dimension of size <limit>"
  kGatherIndex = 2,
  // "index_select: index <value> is out of range for a dimension of size <limit>"
  kIndexSelectIndex = 3,
  // "one_hot: class <value> is out of range for <limit> classes"
  kOneHotClass = 4,
  // "scatter_add: index <value> is out of range for a dimension of size <limit>"
  kScatterAddIndex = 5,
};

struct DeviceErrorFlag {
  int code;  // 0: no error
  int unused;
  long long value;
  long long limit;
  unsigned* raised;  // device memory: nonzero while code is (null: none kept)
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// Records the first error seen since the host last cleared the flag. No atomics: many threads of
// one kernel may race here, but they raise the same code with the same limit, so whichever
// value lands is a genuine offending value. Kernels of one stream run in order, so a later
// kernel sees the earlier record and leaves it alone.
__device__ __forceinline__ void raise_device_error(DeviceErrorFlag* flag, int code, long long value,
                                                   long long limit) {
  volatile DeviceErrorFlag* f = flag;
  if (f->code != kDeviceErrorNone) return;
  f->value = value;
  f->limit = limit;
  __threadfence_system();
  f->code = code;
  if (unsigned* raised = f->raised) *static_cast<volatile unsigned*>(raised) = 1u;
}
#endif

}  // namespace ember::kernels::cuda
