/* The C entry point by which an out-of-tree PyTorch backend library describes its device to
 * txscore. Plain C, so a backend built by anyone, with any compiler, can export it.
 *
 * txscore loads the library named by `devices.backend_library` with dlopen(RTLD_NOW |
 * RTLD_GLOBAL) and looks up TXSCORE_DESCRIBE_BACKEND_SYMBOL. When the library exports it,
 * txscore calls it once, on the start-up thread, before any tensor touches the device:
 *
 *   - the library registers its backend on the PrivateUse1 dispatch key if it has not done so
 *     already (from its static initialisers, as torch-spyre does, or in this call, which lets
 *     it take `options` into account);
 *   - it fills `*out` and returns 0; or it writes a NUL-terminated reason into `error` (at most
 *     `error_capacity` bytes) and returns nonzero, and txscore reports the device absent with
 *     that reason.
 *
 * A library that does not export the symbol (a real torch-spyre library does not) is described
 * by the settings file's `devices.backend` section instead (service/settings.h); entries given
 * there override what a library says of itself, so one library can be loaded under another kind
 * name or with another cost profile without rebuilding it.
 *
 * Versioning: txscore sets out->abi_version and out->struct_size before the call. A library
 * refuses (returns nonzero) an abi_version whose major part (abi_version / 100) it does not
 * know, and writes no field past struct_size. Fields are only ever appended, with a minor bump.
 *
 * Ownership: every string the library puts in `*out` is NUL-terminated and owned by the
 * library; it must stay valid until the library is unloaded (txscore never unloads it).
 * Option keys and values are owned by txscore and valid only during the call.
 *
 * Example (accelerator/emulated_device_backend.cc is the full one):
 *
 *   int txscore_describe_backend(const TxscoreBackendOption* options, size_t option_count,
 *                                TxscoreBackendDescription* out, char* error, size_t error_capacity) {
 *     if (out->abi_version / 100 != 1) { snprintf(error, error_capacity, "ABI %u", out->abi_version); return 1; }
 *     register_my_backend_on_privateuse1();
 *     out->kind = "mydev"; out->device_count = 1; out->device_index = 0;
 *     out->dtypes = "bfloat16,float16"; out->native_ops = "matmul,softmax,activation";
 *     out->memory_bytes = 32LL << 30; out->alignment = 64;
 *     return 0;
 *   }
 */
#ifndef TXSCORE_ACCELERATOR_BACKEND_ABI_H_
#define TXSCORE_ACCELERATOR_BACKEND_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 100 * major + minor. This header describes 1.0. */
#define TXSCORE_BACKEND_ABI_VERSION 100u

#define TXSCORE_DESCRIBE_BACKEND_SYMBOL "txscore_describe_backend"

/* One entry of the settings file's `devices.backend.options` map, as text ("150", "true"). */
typedef struct TxscoreBackendOption {
  const char* key;
  const char* value;
} TxscoreBackendOption;

/* What the backend is. txscore zero-fills the struct before the call, so a field left alone
 * reads as "not said": a string NULL, a number 0. */
typedef struct TxscoreBackendDescription {
  uint32_t abi_version; /* in: TXSCORE_BACKEND_ABI_VERSION of the caller */
  uint32_t struct_size; /* in: sizeof(TxscoreBackendDescription) of the caller */

  /* The kind name plans, metrics and `placement:` use: 1-32 characters of [a-z0-9_],
   * starting with a letter ("spyre", "emulated"). Required. */
  const char* kind;
  int32_t device_count; /* devices the backend has; 0: 1 */
  int32_t device_index; /* the one txscore places stages on (privateuseone:<index>); 0-based */

  /* Comma-separated, no spaces. dtypes: "float32", "bfloat16", "float16". native_ops: the
   * coarse op vocabulary of accelerator/device.h (matmul, softmax, rms_norm, rope, embedding,
   * activation, tree_walk); a stage needing another op uses an op adapter or is not placed
   * there. Both required. */
  const char* dtypes;
  const char* native_ops;

  int64_t memory_bytes; /* device memory; 0: not known, and not checked by placement */
  int32_t alignment;    /* preferred multiple for head_dim and vocabulary; 0 or 1: none */
  int32_t is_emulator;  /* nonzero: the device emulates hardware on the host; every plan,
                           log line and metric says "(emulated)" */

  /* The cost profile placement predicts with. With has_cost_profile 0 txscore measures one on
   * privateuseone:<index> at start-up (a few hundred milliseconds, cached by
   * devices.calibration_cache). */
  int32_t has_cost_profile;
  double dispatch_us;        /* fixed cost of one stage call */
  double flops_per_s;        /* sustained matrix-product rate in the backend's dtypes */
  double memory_bytes_per_s; /* device memory bandwidth */
  double copy_bytes_per_s;   /* host <-> device transfers */

  const char* description; /* one line for plans and logs; NULL: txscore writes one */
} TxscoreBackendDescription;

typedef int (*TxscoreDescribeBackendFn)(const TxscoreBackendOption* options, size_t option_count,
                                        TxscoreBackendDescription* out, char* error, size_t error_capacity);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TXSCORE_ACCELERATOR_BACKEND_ABI_H_ */
