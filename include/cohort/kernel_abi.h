/* The C ABI of CPU kernels in a signed kernel bundle (docs/kernels.md,
 * "Signed bundles"). A bundle's shared object exports one function per
 * kernel, named by the manifest's cpu_symbol:
 *
 *   int my_kernel(const cohort_kernel_call* call);
 *
 * It returns 0 when it wrote the output, anything else when it failed: the
 * item then ends with kernel_error and the message written to call->error.
 * Cohort calls it from several threads at once, with inputs that passed the
 * manifest's rules (count, types, `require`) and an output of exactly
 * `output_length` elements. Plain C: any compiler can build against it. */
#ifndef COHORT_KERNEL_ABI_H
#define COHORT_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; Cohort refuses a call from a different one. */
#define COHORT_KERNEL_ABI_VERSION 1

/* Element types, as cohort::dtype numbers them. */
enum cohort_dtype {
  COHORT_F32 = 0,
  COHORT_F64 = 1,
  COHORT_I32 = 2,
  COHORT_I64 = 3,
  COHORT_U8 = 4
};

/* One input buffer: `length` elements of `dtype` at `data`. */
typedef struct cohort_buffer {
  const void* data;
  uint64_t length;
  int32_t dtype;
} cohort_buffer;

/* One call of a kernel. */
typedef struct cohort_kernel_call {
  /* COHORT_KERNEL_ABI_VERSION of the Cohort that calls. */
  uint32_t abi_version;
  uint32_t input_count;
  const cohort_buffer* inputs;
  /* The output: `output_length` elements of `output_dtype`, zeroed. */
  void* output;
  uint64_t output_length;
  int32_t output_dtype;
  /* The item's scalars (kernel_args). */
  double alpha;
  uint64_t m;
  uint64_t n;
  uint64_t k;
  uint32_t top_k;
  /* Where a failing kernel may write its message (NUL-terminated, at most
   * error_size bytes with the NUL). */
  char* error;
  uint32_t error_size;
} cohort_kernel_call;

/* The type of a kernel's function. */
typedef int (*cohort_cpu_kernel)(const cohort_kernel_call* call);

#ifdef __cplusplus
}
#endif

#endif
