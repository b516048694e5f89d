/* Allocations: -H strings, hostfiles (text and file), the Slurm/PBS environment, host by host. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <unistd.h>

#include "check.h"

static void host_at(const pm_allocation* a, size_t i, const char* name, uint32_t slots,
                    uint32_t max_slots) {
  pm_host h = PM_HOST_INIT;
  CHECK_OK(pm_allocation_host(a, i, &h));
  CHECK_STR(h.name, name);
  CHECK(h.slots == slots);
  CHECK(h.max_slots == max_slots);
}

static void from_hosts(void) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, "a:2,b:2,c,a:1"));
  size_t n = 0;
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 3);
  host_at(a, 0, "a", 3, 0); /* a repeated host adds up */
  host_at(a, 1, "b", 2, 0);
  host_at(a, 2, "c", 1, 0);
  uint64_t slots = 0;
  CHECK_OK(pm_allocation_total_slots(a, &slots));
  CHECK(slots == 6);
  pm_allocation_source source = PM_SOURCE_API;
  CHECK_OK(pm_allocation_source_of(a, &source));
  CHECK(source == PM_SOURCE_HOST_LIST);
  pm_host h = PM_HOST_INIT;
  CHECK(h.name == NULL);
  CHECK_FAILS(pm_allocation_host(a, 3, &h), PM_E_INVALID, "host 3 is outside the allocation (3");
  CHECK(h.name == NULL);
  pm_allocation_destroy(a);

  /* This machine's names become one local host named by its hostname. */
  CHECK_OK(pm_allocation_from_hosts(&a, "localhost:2,127.0.0.1:1"));
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 1);
  CHECK_OK(pm_allocation_host(a, 0, &h));
  CHECK(h.local == 1);
  CHECK(h.slots == 3);
  char hostname[256];
  CHECK(gethostname(hostname, sizeof hostname) == 0);
  CHECK_STR(h.name, hostname);
  pm_allocation_destroy(a);
}

static void bad_host_lists(void) {
  pm_allocation* a = NULL;
  CHECK_FAILS(pm_allocation_from_hosts(&a, "a:x"), PM_E_PARSE, "'x'");
  CHECK_FAILS(pm_allocation_from_hosts(&a, "a:0"), PM_E_PARSE, "-H");
  CHECK_FAILS(pm_allocation_from_hosts(&a, ""), PM_E_PARSE, "-H");
  CHECK_FAILS(pm_allocation_from_hosts(&a, "a,,b"), PM_E_PARSE, "-H");
  CHECK_FAILS(pm_allocation_from_hosts(&a, "a:-2"), PM_E_PARSE, "-H");
  CHECK_FAILS(pm_allocation_from_hosts(&a, "a:99999999999999999999"), PM_E_PARSE, "-H");
  CHECK(a == NULL);
}

static void hostfiles(void) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hostfile_text(&a,
                                            "# cluster\n"
                                            "n1 slots=4 max_slots=6\n"
                                            "\n"
                                            "n2 slots=2\n",
                                            "hosts.txt"));
  size_t n = 0;
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 2);
  host_at(a, 0, "n1", 4, 6);
  host_at(a, 1, "n2", 2, 0);
  pm_allocation_source source = PM_SOURCE_API;
  CHECK_OK(pm_allocation_source_of(a, &source));
  CHECK(source == PM_SOURCE_HOSTFILE);
  pm_allocation_destroy(a);
  a = NULL;

  CHECK_FAILS(pm_allocation_from_hostfile_text(&a, "n1 slots=two\n", "hosts.txt"), PM_E_PARSE,
              "hosts.txt:1");
  CHECK_FAILS(pm_allocation_from_hostfile_text(&a, "n1 slots=4 max_slots=2\n", NULL), PM_E_PARSE,
              "hostfile:1");
  CHECK(a == NULL);

  /* From a file. */
  char path[] = "/tmp/pm_c_hostfile_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const char text[] = "x1 slots=3\nx2\nx2\n";
  CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
  close(fd);
  CHECK_OK(pm_allocation_from_hostfile(&a, path));
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 2);
  host_at(a, 0, "x1", 3, 0);
  host_at(a, 1, "x2", 2, 0); /* repeated bare lines add a slot each */
  pm_allocation_destroy(a);
  a = NULL;
  unlink(path);
  CHECK_FAILS(pm_allocation_from_hostfile(&a, path), PM_E_PARSE, "cannot read");
  CHECK(a == NULL);
}

static void batch_environment(void) {
  pm_allocation* a = NULL;
  const char* slurm[] = {"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=node[01-03]",
                         "SLURM_TASKS_PER_NODE=4(x2),2", "NOT_AN_ASSIGNMENT", NULL};
  CHECK_OK(pm_allocation_from_environment(&a, slurm));
  size_t n = 0;
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 3);
  host_at(a, 0, "node01", 4, 0);
  host_at(a, 1, "node02", 4, 0);
  host_at(a, 2, "node03", 2, 0);
  pm_allocation_source source = PM_SOURCE_API;
  CHECK_OK(pm_allocation_source_of(a, &source));
  CHECK(source == PM_SOURCE_SLURM);
  pm_allocation_destroy(a);
  a = NULL;

  const char* bad_slurm[] = {"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=node[03-01]",
                             "SLURM_TASKS_PER_NODE=1", NULL};
  CHECK_FAILS(pm_allocation_from_environment(&a, bad_slurm), PM_E_PARSE, "SLURM_JOB_NODELIST");

  /* PBS: the nodefile lists a host once per slot. */
  char path[] = "/tmp/pm_c_pbs_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const char text[] = "p1\np1\np2\n";
  CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
  close(fd);
  char variable[64];
  snprintf(variable, sizeof variable, "PBS_NODEFILE=%s", path);
  const char* pbs[] = {variable, NULL};
  CHECK_OK(pm_allocation_from_environment(&a, pbs));
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 2);
  host_at(a, 0, "p1", 2, 0);
  host_at(a, 1, "p2", 1, 0);
  CHECK_OK(pm_allocation_source_of(a, &source));
  CHECK(source == PM_SOURCE_PBS);
  pm_allocation_destroy(a);
  a = NULL;
  unlink(path);

  const char* none[] = {"HOME=/root", NULL};
  CHECK_FAILS(pm_allocation_from_environment(&a, none), PM_E_ALLOCATION, "no Slurm or PBS");
  const char* empty[] = {NULL};
  CHECK_FAILS(pm_allocation_from_environment(&a, empty), PM_E_ALLOCATION, "no Slurm or PBS");
  CHECK(a == NULL);
  /* The process's own environment: outside a batch job there is none (ctest runs us there). */
  if (getenv("SLURM_JOB_ID") == NULL && getenv("PBS_NODEFILE") == NULL) {
    CHECK_FAILS(pm_allocation_from_environment(&a, NULL), PM_E_ALLOCATION, "no Slurm or PBS");
  }
}

static void host_by_host(void) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_new(&a));
  size_t n = 9;
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 0);
  CHECK_OK(pm_allocation_add_host(a, "gpu1", 8, 0));
  CHECK_OK(pm_allocation_add_host(a, "gpu2", 4, 8));
  CHECK_OK(pm_allocation_add_host(a, "localhost", 1, 0));
  CHECK_FAILS(pm_allocation_add_host(a, "gpu1", 1, 0), PM_E_ALLOCATION, "'gpu1' is already");
  /* Another name of this machine is this machine again. */
  CHECK_FAILS(pm_allocation_add_host(a, "127.0.0.1", 2, 0), PM_E_ALLOCATION,
              "host '127.0.0.1' is this machine, in the allocation already as 'localhost'");
  CHECK_FAILS(pm_allocation_add_host(a, "gpu3", 0, 0), PM_E_INVALID, "slots must be at least 1");
  CHECK_FAILS(pm_allocation_add_host(a, "x y", 1, 0), PM_E_INVALID,
              "a blank or a control character");
  CHECK_FAILS(pm_allocation_add_host(a, "h\n", 1, 0), PM_E_INVALID,
              "a blank or a control character");
  CHECK_FAILS(pm_allocation_add_host(a, "gpu3", 4, 2), PM_E_INVALID, "max_slots 2 is below");
  CHECK_FAILS(pm_allocation_add_host(a, "", 4, 0), PM_E_INVALID, "empty");
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 3);
  host_at(a, 0, "gpu1", 8, 0);
  host_at(a, 1, "gpu2", 4, 8);
  pm_host h = PM_HOST_INIT;
  CHECK_OK(pm_allocation_host(a, 0, &h));
  CHECK(h.local == 0);
  CHECK_OK(pm_allocation_host(a, 2, &h));
  CHECK(h.local == 1);
  uint64_t slots = 0;
  CHECK_OK(pm_allocation_total_slots(a, &slots));
  CHECK(slots == 13);
  CHECK_OK(pm_allocation_add_host(a, "bob@gpu4", 1, 0)); /* a user, as this call always took */
  pm_allocation_source source = PM_SOURCE_LOCAL;
  CHECK_OK(pm_allocation_source_of(a, &source));
  CHECK(source == PM_SOURCE_API);
  pm_allocation_destroy(a);
}

static void this_machine(void) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_local(&a));
  size_t n = 0;
  CHECK_OK(pm_allocation_host_count(a, &n));
  CHECK(n == 1);
  pm_host h = PM_HOST_INIT;
  CHECK_OK(pm_allocation_host(a, 0, &h));
  CHECK(h.local == 1);
  CHECK(h.slots >= 1);
  pm_allocation_source source = PM_SOURCE_API;
  CHECK_OK(pm_allocation_source_of(a, &source));
  CHECK(source == PM_SOURCE_LOCAL);
  pm_allocation_destroy(a);
}

/* pm_host version 2: user and port; a version-1 caller's shorter struct is left alone past its
 * end (the library writes only the fields of the version it is given). */
static void ssh_reach(void) {
  pm_allocation* a = NULL;
  CHECK_OK(
      pm_allocation_from_hostfile_text(&a, "bob@n1 slots=2\nn2 port=2222 username=al\nn3\n", "hf"));
  pm_host h = PM_HOST_INIT;
  CHECK_OK(pm_allocation_host(a, 0, &h));
  CHECK_STR(h.user, "bob");
  CHECK(h.port == 0);
  CHECK_OK(pm_allocation_host(a, 1, &h));
  CHECK_STR(h.user, "al");
  CHECK(h.port == 2222);
  CHECK_OK(pm_allocation_host(a, 2, &h));
  CHECK(h.user == NULL);
  CHECK(h.port == 0);

  struct {
    unsigned version;
    const char* name;
    uint32_t slots;
    uint32_t max_slots;
    int local;
    char after[sizeof(const char*) + 8]; /* where version 2's fields would be */
  } v1;
  memset(&v1, 0x5a, sizeof v1);
  v1.version = 1;
  CHECK_OK(pm_allocation_host(a, 1, (pm_host*)(void*)&v1));
  CHECK_STR(v1.name, "n2");
  for (size_t i = 0; i < sizeof v1.after; ++i) CHECK(v1.after[i] == 0x5a);
  pm_allocation_destroy(a);
  a = NULL;

  CHECK_OK(pm_allocation_from_hosts(&a, "bob@n1:2,n2"));
  CHECK_OK(pm_allocation_host(a, 0, &h));
  CHECK_STR(h.user, "bob");
  CHECK(h.slots == 2);
  pm_allocation_destroy(a);
  a = NULL;
  CHECK_FAILS(pm_allocation_from_hostfile_text(&a, "n1 port=0\n", "hf"), PM_E_PARSE,
              "hostfile hf:1: invalid port value '0'");
  CHECK_FAILS(pm_allocation_from_hosts(&a, "@n1"), PM_E_PARSE, "empty user name");
  CHECK(a == NULL);
}

int main(void) {
  from_hosts();
  bad_host_lists();
  hostfiles();
  batch_environment();
  host_by_host();
  this_machine();
  ssh_reach();
  printf("c_allocation_test: ok\n");
  return 0;
}
