// A backend library as torch-spyre ships one: it registers its PrivateUse1 backend from a
// static initialiser when it is loaded and exports no txscore_describe_backend, so only the
// settings file can describe it to txscore. Its device is the emulated device's code (an
// emulator, running on the host CPU); the tests that load it say so in their description.
#include <cstdio>
#include <cstdlib>

#include "accelerator/emulated_device.h"

namespace {

const bool kRegistered = [] {
  txscore::Status status = txscore::accelerator::RegisterEmulatedDevice();
  if (!status.ok()) {
    std::fprintf(stderr, "undescribed test backend: %s\n", status.error().message.c_str());
    std::abort();
  }
  return true;
}();

}  // namespace
