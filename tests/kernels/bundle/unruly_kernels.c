/* A shared object whose loading goes wrong, for the tests of loading in
 * isolation (kernels/bundle/isolation.hpp): built as libunruly_crash.so,
 * whose constructor crashes the process that loads it (SIGSEGV), and
 * libunruly_hang.so, whose constructor never returns. Only a child process
 * ever loads them. Each also exports acme_scale_add's symbol name, so a
 * manifest naming it passes every check before the load. */
#include <signal.h>
#include <unistd.h>

#include "cohort/kernel_abi.h"

__attribute__((constructor)) static void misbehave(void) {
#if defined(UNRULY_CRASH)
  raise(SIGSEGV);
#elif defined(UNRULY_HANG)
  for (;;)
    pause();
#endif
}

int acme_scale_add(const cohort_kernel_call* call) {
  (void)call;
  return 1;
}
