// Lets a CPU-only PyTorch build run autograd on FakeTensors whose device is "cuda".
//
// All tensor ops on such tensors are served by FakeTensorMode (meta kernels); no CUDA
// kernel or memory is ever used. What the CPU build lacks is the small amount of
// device *bookkeeping* that autograd does for CUDA tensors:
//   * a DeviceGuardImpl for DeviceType::CUDA (autograd's InputMetadata asks it for the
//     tensor's current stream)  -> we register c10's own FakeGuardImpl<CUDA>;
//   * CUDA hooks answering "is there a CUDA accelerator" (InputBuffer::add calls
//     at::accelerator::getCurrentStream, which needs getAccelerator() == CUDA)
//     -> we register a minimal CUDAHooks that says yes and does nothing else.
// The library must be loaded (ctypes, RTLD_GLOBAL) BEFORE `import torch`, because
// at::detail::getCUDAHooks() resolves the hooks once, on first use.
// Loaded by validation/fake_cuda.py, which compiles it on first use (g++, ~2 s).
#include <c10/core/impl/FakeGuardImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace {

struct FakeCUDAHooks final : public at::CUDAHooksInterface {
  FakeCUDAHooks(at::CUDAHooksArgs) {}
  void init() const override {}
  bool hasCUDA() const override { return true; }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 8; }
  int getNumGPUs() const override { return 8; }
  c10::DeviceIndex current_device() const override { return 0; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  void deviceSynchronize(c10::DeviceIndex) const override {}
};

struct Registrar {
  Registrar() {
    auto idx = static_cast<size_t>(c10::DeviceType::CUDA);
    if (c10::impl::device_guard_impl_registry[idx].load() == nullptr) {
      static c10::impl::FakeGuardImpl<c10::DeviceType::CUDA> impl;
      c10::impl::device_guard_impl_registry[idx].store(&impl);
    }
  }
};
Registrar registrar;

}  // namespace

namespace at {
// Key must be "CUDAHooks": that is the name getCUDAHooks() asks the registry for.
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", FakeCUDAHooks)
}  // namespace at

extern "C" int fake_cuda_hooks_active() {
  return at::detail::getCUDAHooks().hasCUDA() ? 1 : 0;
}
