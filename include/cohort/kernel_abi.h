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

/* Most input buffers a kernel takes. */
#define COHORT_MAX_INPUTS 8

/* The one argument of a kernel's GPU entry point (CUDA or HIP), passed by
 * value; every pointer is device memory:
 *
 *   extern "C" __global__ void my_kernel(cohort_gpu_call call);
 *
 * Cohort launches ceil(threads / block) blocks of `block` threads, where
 * `threads` is the manifest's rule (the output's length when it has none):
 * the kernel checks its own index against the lengths. The output is
 * zeroed before the launch. */
typedef struct cohort_gpu_call {
  const void* inputs[COHORT_MAX_INPUTS];
  uint64_t lengths[COHORT_MAX_INPUTS];
  int32_t dtypes[COHORT_MAX_INPUTS];
  uint32_t input_count;
  void* output;
  uint64_t output_length;
  int32_t output_dtype;
  double alpha;
  uint64_t m;
  uint64_t n;
  uint64_t k;
  uint32_t top_k;
} cohort_gpu_call;

#ifdef __cplusplus
}
#endif

#endif
