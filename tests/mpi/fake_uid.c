/* An LD_PRELOAD shim for the tests where another user is the attacker (pmrun_mpi_test.cpp): the
 * process claims to be PM_FAKE_UID (default 0, root) to whoever asks getuid/geteuid, and its gid
 * likewise, as the attacker of issue 20 did to make a PMIx tool claim to be the job's owner. The
 * kernel is not fooled: only what the process writes (PMIx's handshake carries its euid) is. */
#include <stdlib.h>
#include <sys/types.h>

static unsigned fake(void) {
  const char* v = getenv("PM_FAKE_UID");
  return v != NULL ? (unsigned)strtoul(v, NULL, 10) : 0u;
}

__attribute__((visibility("default"))) uid_t getuid(void) { return (uid_t)fake(); }
__attribute__((visibility("default"))) uid_t geteuid(void) { return (uid_t)fake(); }
__attribute__((visibility("default"))) gid_t getgid(void) { return (gid_t)fake(); }
__attribute__((visibility("default"))) gid_t getegid(void) { return (gid_t)fake(); }
