/* Emulate an older x86 CPU for the libraries' kernel dispatch: CPUID is made to fault
 * (arch_prctl ARCH_SET_CPUID, Linux on CPUs with CPUID faulting: /proc/cpuinfo flag
 * cpuid_fault), and the SIGSEGV handler answers each CPUID with the real answer less the
 * features of CPUID_MASK's kind. torch's cpuinfo, oneDNN, MKL and ONNX Runtime's MLAS all read
 * CPUID, so each picks the kernels it would pick on that kind of CPU; the instructions still
 * run on this core. Loaded with LD_PRELOAD by benchmarks/emulate_cpu.py; the setting is
 * per thread, inherited by threads and forks and reset by execve, where LD_PRELOAD loads
 * this again.
 *
 * A process that installs its own SIGSEGV handler (Python's faulthandler, which pytest
 * enables; the JVM, which uses SIGSEGV for null checks and safepoints; a browser's crash
 * reporter) would take CPUID's faults from this one and die at its next CPUID. So sigaction
 * and signal are interposed for SIGSEGV, as the JVM's own libjsig does: the process's handler
 * is kept as the one this handler passes every real fault to, and is what the process reads
 * back, while this handler stays installed. A whole workflow (Snakemake, its Python jobs,
 * Anserini's Java and pytest) then runs as the emulated kind.
 *
 * CPUID_MASK kinds:
 *   avx512_vnni  AVX-512 with VNNI, no bf16, no AMX (Cascade Lake, Ice Lake server)
 *   avx512       AVX-512 without VNNI (Skylake server)
 *   avx2         AVX2 and FMA only (Haswell to Coffee Lake, AMD Zen 1-3)
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))

/* CPUID leaf 7 sub-leaf 0 EBX / ECX / EDX and sub-leaf 1 EAX: the bits each kind lacks. */
struct mask {
  const char *kind;
  uint32_t l7_ebx, l7_ecx, l7_edx, l7s1_eax;
};

/* AMX (EDX 22 amx_bf16, 24 amx_tile, 25 amx_int8), AVX512-FP16 (EDX 23), AVX-VNNI and
 * AVX512-BF16 (sub-leaf 1 EAX 4, 5), AMX-FP16 (sub-leaf 1 EAX 21). */
#define NO_BF16_EDX (BIT(22) | BIT(23) | BIT(24) | BIT(25))
#define NO_BF16_S1 (BIT(4) | BIT(5) | BIT(21))
/* AVX512 VNNI (ECX 11). */
#define NO_VNNI_ECX BIT(11)
/* Every AVX-512 subset: EBX f 16, dq 17, ifma 21, pf 26, er 27, cd 28, bw 30, vl 31; ECX vbmi
 * 1, vbmi2 6, vnni 11, bitalg 12, vpopcntdq 14; EDX 4vnniw 2, 4fmaps 3, vp2intersect 8. */
#define NO_AVX512_EBX \
  (BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31))
#define NO_AVX512_ECX (BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14))
#define NO_AVX512_EDX (BIT(2) | BIT(3) | BIT(8))

static const struct mask MASKS[] = {
    {"avx512_vnni", 0, 0, NO_BF16_EDX, NO_BF16_S1},
    {"avx512", 0, NO_VNNI_ECX, NO_BF16_EDX, NO_BF16_S1},
    {"avx2", NO_AVX512_EBX, NO_AVX512_ECX, NO_BF16_EDX | NO_AVX512_EDX, NO_BF16_S1},
};

static const struct mask *active;
/* The SIGSEGV handler the process asked for (SIG_DFL until it asks): every fault that is not a
 * CPUID goes to it. */
static struct sigaction chained;
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static int install(int sig, const struct sigaction *act, struct sigaction *old) {
  if (real_sigaction == NULL) real_sigaction = dlsym(RTLD_NEXT, "sigaction");
  return real_sigaction(sig, act, old);
}

/* A fault that is not a CPUID: the process's own handler, or the default action (the
 * instruction faults again once this returns, and the process dies as it would have). */
static void pass_on(int sig, siginfo_t *info, void *context) {
  if (chained.sa_flags & SA_SIGINFO) {
    chained.sa_sigaction(sig, info, context);
  } else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN) {
    chained.sa_handler(sig);
  } else {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    install(SIGSEGV, &dfl, NULL);
  }
}

static void on_segv(int sig, siginfo_t *info, void *context) {
  ucontext_t *uc = context;
  greg_t *r = uc->uc_mcontext.gregs;
  /* A faulting CPUID is a general-protection fault (SI_KERNEL); only then is RIP readable
   * for certain (a jump to an unmapped address faults with RIP there). */
  const uint8_t *ip = (const uint8_t *)r[REG_RIP];
  if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
    pass_on(sig, info, context);
    return;
  }
  uint32_t a, b, c, d, leaf = (uint32_t)r[REG_RAX], sub = (uint32_t)r[REG_RCX];
  syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(leaf), "c"(sub));
  syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
  if (leaf == 7 && sub == 0) {
    b &= ~active->l7_ebx;
    c &= ~active->l7_ecx;
    d &= ~active->l7_edx;
  } else if (leaf == 7 && sub == 1) {
    a &= ~active->l7s1_eax;
  }
  r[REG_RAX] = a;
  r[REG_RBX] = b;
  r[REG_RCX] = c;
  r[REG_RDX] = d;
  r[REG_RIP] += 2;
}

/* The process's SIGSEGV handler is recorded, not installed (see the top). */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (sig != SIGSEGV || active == NULL) return install(sig, act, old);
  struct sigaction was = chained;
  if (act != NULL) chained = *act;
  if (old != NULL) *old = was;
  return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
  if (sig != SIGSEGV || active == NULL) {
    static sighandler_t (*real_signal)(int, sighandler_t);
    if (real_signal == NULL) real_signal = dlsym(RTLD_NEXT, "signal");
    return real_signal(sig, handler);
  }
  sighandler_t was = chained.sa_handler; /* a union with sa_sigaction: whichever it was */
  memset(&chained, 0, sizeof chained);
  chained.sa_handler = handler;
  return was;
}

__attribute__((constructor)) static void start(void) {
  const char *kind = getenv("CPUID_MASK");
  if (kind == NULL || *kind == '\0') return;
  const struct mask *found = NULL;
  for (size_t i = 0; i < sizeof MASKS / sizeof MASKS[0]; i++)
    if (strcmp(kind, MASKS[i].kind) == 0) found = &MASKS[i];
  if (found == NULL) {
    fprintf(stderr, "cpuid_mask: unknown CPUID_MASK %s (avx512_vnni | avx512 | avx2)\n", kind);
    _exit(2);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  install(SIGSEGV, &sa, &chained);
  active = found;
  if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
    perror("cpuid_mask: arch_prctl(ARCH_SET_CPUID) (this CPU or kernel has no CPUID faulting)");
    _exit(2);
  }
}
