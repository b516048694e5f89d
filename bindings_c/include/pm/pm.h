/* pm.h: libpm's C API (C11). Reference: docs/c-api.md.
 *
 * Conventions, for every function here:
 *   - Objects are opaque handles (pm_allocation, pm_job, pm_map, pm_run, pm_report, pm_sim,
 *     pm_sim_result). Each is created by one function and freed by its *_destroy, which accepts
 *     NULL. A handle is not thread-safe: use one from one thread at a time (pm_run_signal and
 *     pm_run_cancel are the exceptions, see there).
 *   - A function that creates something (a handle, or a string or string array the caller frees)
 *     takes that out-parameter FIRST; a getter takes the object first and its result last.
 *   - Every function that can fail returns PM_OK (0) or a negative pm_status, and then leaves a
 *     one-line message in pm_last_error(). On failure, out-parameters are left unchanged.
 *     NULL handles and NULL out-parameters are PM_E_INVALID, never a crash.
 *   - Options structs begin with `unsigned version` and come with an *_INIT macro: always start
 *     from it (`pm_run_options o = PM_RUN_OPTIONS_INIT;`), then set fields. A version this library
 *     does not know is PM_E_VERSION. A NULL options pointer means the defaults.
 *   - Output structs (pm_host, pm_placement, pm_report_info, ...) also begin with `version`: set it
 *     with the *_INIT macro; the library fills the fields of that version. Strings in them point
 *     into the object they were read from and live as long as it does.
 *   - No C++ exception ever crosses this API; no function calls exit() or abort().
 */
#ifndef PM_PM_H
#define PM_PM_H

#include <stddef.h>
#include <stdint.h>

#define PM_C_API __attribute__((visibility("default")))

/* The version of the header; pm_version() gives the library's (compare them at run time). */
#define PM_C_VERSION_MAJOR 0
#define PM_C_VERSION_MINOR 1
#define PM_C_VERSION_PATCH 0
#define PM_C_VERSION_NUMBER \
  (PM_C_VERSION_MAJOR * 10000 + PM_C_VERSION_MINOR * 100 + PM_C_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status, errors, memory ------------------------------------------------------------------ */

/* What went wrong. PM_E_USAGE .. PM_E_INTERNAL mirror pm::errc (libpm/include/pm/error.hpp). */
typedef enum pm_status {
  PM_OK = 0,
  PM_E_USAGE = -1,          /* a malformed option value (a profile list, a script, ...) */
  PM_E_PARSE = -2,          /* a malformed host list, hostfile, Slurm/PBS variable */
  PM_E_ALLOCATION = -3,     /* an allocation that cannot serve the request */
  PM_E_MAPPING = -4,        /* the job does not fit the allocation */
  PM_E_ENV = -5,            /* an invalid variable name or value */
  PM_E_LAUNCH = -6,         /* the job could not be started */
  PM_E_NOT_FOUND = -7,      /* a rank's program does not exist */
  PM_E_NOT_EXECUTABLE = -8, /* a rank's program cannot be executed */
  PM_E_SYSTEM = -9,         /* an operating-system call failed */
  PM_E_INTERNAL = -10,      /* a bug in libpm */
  PM_E_INVALID = -32,       /* a NULL or out-of-range argument */
  PM_E_NOMEM = -33,         /* out of memory */
  PM_E_VERSION = -34        /* an options or output struct version this library does not know */
} pm_status;

/* "0.1.0" and 100 (MAJOR*10000 + MINOR*100 + PATCH) of the library that is linked. */
PM_C_API unsigned pm_version(void);
PM_C_API const char* pm_version_string(void);

/* The message of this thread's last failed call ("" if the last call succeeded). Never NULL;
 * valid until this thread's next pm_* call. Never allocates (also not for PM_E_NOMEM). */
PM_C_API const char* pm_last_error(void);
/* "PM_E_PARSE" for PM_E_PARSE, "PM_OK", "unknown status" for anything else. */
PM_C_API const char* pm_status_name(int status);

/* Frees a string this API returned (NULL is harmless). */
PM_C_API void pm_free(void* p);
/* Frees a NULL-terminated string array this API returned, and its strings (NULL is harmless). */
PM_C_API void pm_strings_free(char** strings);

/* ---- allocations: the ordered hosts a job may use ---------------------------------------------
 */

/* An allocation object: a list of hosts with slots. */
typedef struct pm_allocation pm_allocation;

typedef enum pm_allocation_source {
  PM_SOURCE_LOCAL = 0, /* this machine, one slot per core (may be oversubscribed) */
  PM_SOURCE_HOST_LIST, /* "a:2,b:2" (-H) */
  PM_SOURCE_HOSTFILE,  /* an Open MPI hostfile */
  PM_SOURCE_SLURM,     /* the Slurm job or step this process runs in */
  PM_SOURCE_PBS,       /* PBS_NODEFILE */
  PM_SOURCE_API        /* built host by host */
} pm_allocation_source;

/* One host, as read by pm_allocation_host(). */
typedef struct pm_host {
  unsigned version;
  const char* name;
  uint32_t slots;
  uint32_t max_slots; /* 0: no hard limit */
  int local;          /* 1: this machine */
  /* version 2: how ssh reaches the host (`bob@node1`, hostfile `username=` and `port=`) */
  const char* user; /* NULL: ssh's default */
  uint16_t port;    /* 0: ssh's default */
} pm_host;
#define PM_HOST_VERSION 2
#define PM_HOST_INIT \
  { PM_HOST_VERSION, NULL, 0, 0, 0, NULL, 0 }

/* An empty allocation; add hosts with pm_allocation_add_host(). */
PM_C_API int pm_allocation_new(pm_allocation** out);
/* This machine, one slot per available core (what pmrun uses when given no hosts). */
PM_C_API int pm_allocation_local(pm_allocation** out);
/* From a host list as -H takes it: "a:2,b:2,c" (no count: one slot; a repeated host adds up).
 * Names of this machine (localhost, 127.0.0.1, its FQDN) become one host named by its hostname.
 * PM_E_PARSE with a message naming the token for a malformed list. */
PM_C_API int pm_allocation_from_hosts(pm_allocation** out, const char* hosts);
/* From an Open MPI hostfile ("name slots=N max_slots=M", '#' comments). PM_E_PARSE names the
 * file, line and token, also when the file cannot be read ("cannot read 'f': No such file"). */
PM_C_API int pm_allocation_from_hostfile(pm_allocation** out, const char* path);
/* The same from the text of a hostfile; `name` names it in messages (NULL: "hostfile"). */
PM_C_API int pm_allocation_from_hostfile_text(pm_allocation** out, const char* text,
                                              const char* name);
/* The Slurm (SLURM_JOB_NODELIST, ...) or PBS (PBS_NODEFILE) allocation this process runs in.
 * `envp`: a NULL-terminated array of "NAME=value" to read instead of this process's environment
 * (NULL: the process's). PM_E_ALLOCATION when there is none; PM_E_PARSE when it is malformed. */
PM_C_API int pm_allocation_from_environment(pm_allocation** out, const char* const* envp);
PM_C_API void pm_allocation_destroy(pm_allocation* allocation);

/* Appends a host. `slots` >= 1; `max_slots` 0 (no limit) or >= slots. A name already in the
 * allocation is PM_E_ALLOCATION, and so is a second name of this machine ("127.0.0.1" after
 * "localhost": one host per machine); one holding a blank or a control character PM_E_INVALID.
 * The host is marked local when the name is this machine's. */
PM_C_API int pm_allocation_add_host(pm_allocation* allocation, const char* name, uint32_t slots,
                                    uint32_t max_slots);
PM_C_API int pm_allocation_host_count(const pm_allocation* allocation, size_t* out);
/* Host `index` (0 .. count-1); out->name lives as long as the allocation is not changed. */
PM_C_API int pm_allocation_host(const pm_allocation* allocation, size_t index, pm_host* out);
PM_C_API int pm_allocation_total_slots(const pm_allocation* allocation, uint64_t* out);
PM_C_API int pm_allocation_source_of(const pm_allocation* allocation, pm_allocation_source* out);

/* ---- jobs: app contexts, mapping policy, environment ------------------------------------------
 */

/* A job object: what to run (one app context, or several for MPMD), how to place it, and what
 * the ranks are told. */
typedef struct pm_job pm_job;

/* pm_app_options.np: one rank per slot of the app's hosts (the default). */
#define PM_NP_PER_SLOT (-1)

/* One app context (`-np 4 ./a x y`). The strings are copied. */
typedef struct pm_app_options {
  unsigned version;
  const char* const* argv; /* NULL-terminated; argv[0] is the program (searched in PATH) */
  int64_t np;              /* ranks (>= 1), or PM_NP_PER_SLOT */
  const char* hosts;       /* -H for this app: only these allocation hosts; NULL: all */
  const char* wdir;        /* working directory; NULL: the launcher's */
  /* "NAME=value" for this app's ranks only (NULL-terminated, or NULL); they win over everything
   * else a rank is told. */
  const char* const* env;
} pm_app_options;
#define PM_APP_OPTIONS_VERSION 1
#define PM_APP_OPTIONS_INIT \
  { PM_APP_OPTIONS_VERSION, NULL, PM_NP_PER_SLOT, NULL, NULL, NULL }

typedef enum pm_map_by {
  PM_MAP_BY_SLOT = 0, /* fill each host's slots in order (Open MPI's default) */
  PM_MAP_BY_NODE,     /* round robin over hosts */
  PM_MAP_BY_PPR_NODE  /* ppr:N:node: N ranks on every host */
} pm_map_by;

typedef struct pm_mapping_options {
  unsigned version;
  pm_map_by by;
  uint32_t ppr;      /* N of ppr:N:node */
  int oversubscribe; /* -1: only for pm_allocation_local(); 0: never; 1: allowed */
} pm_mapping_options;
#define PM_MAPPING_OPTIONS_VERSION 1
#define PM_MAPPING_OPTIONS_INIT \
  { PM_MAPPING_OPTIONS_VERSION, PM_MAP_BY_SLOT, 0, -1 }

/* What every rank is told (docs/env-contract.md). */
typedef struct pm_env_options {
  unsigned version;
  /* Env profiles: "default", "all", "none", "ompi,torch", "default,tf", "all,-tf"; NULL: default.
   */
  const char* profiles;
  /* -x arguments, NULL-terminated: "VAR" (its value in `inherited`; unset: not exported) or
   * "VAR=value". */
  const char* const* exports;
  /* -mca key value pairs, flattened and NULL-terminated: {"btl", "self", NULL} gives the ranks
   * OMPI_MCA_btl=self. */
  const char* const* mca;
  /* The environment the ranks start from, "NAME=value", NULL-terminated; NULL: this process's
   * (an empty list is an empty start: none of this process's variables reaches the ranks).
   * An outer job's identity (OMPI_COMM_WORLD_*, PMIX_*, RANK, ...) is always removed. */
  const char* const* inherited;
  uint16_t master_port; /* MASTER_PORT; 0: a free port, chosen once per map */
} pm_env_options;
#define PM_ENV_OPTIONS_VERSION 1
#define PM_ENV_OPTIONS_INIT \
  { PM_ENV_OPTIONS_VERSION, NULL, NULL, NULL, NULL, 0 }

PM_C_API int pm_job_new(pm_job** out);
PM_C_API void pm_job_destroy(pm_job* job);
/* Appends an app context (MPMD: call it once per app; ranks are numbered across apps in order).
 * PM_E_INVALID for a missing argv/program; PM_E_USAGE for np 0; PM_E_ENV for a bad env entry. */
PM_C_API int pm_job_add_app(pm_job* job, const pm_app_options* app);
PM_C_API int pm_job_app_count(const pm_job* job, size_t* out);
PM_C_API int pm_job_set_mapping(pm_job* job, const pm_mapping_options* mapping);
/* PM_E_USAGE for an unknown profile word. The exports are checked by pm_map_job(). */
PM_C_API int pm_job_set_env(pm_job* job, const pm_env_options* env);

/* Within each host (docs/gpus.md): pmrun's options, with its spellings and its parsers. Setting
 * any of them makes a launch read every host's topology and plan its ranks' cores, GPUs and NIC
 * before any rank starts; a host that cannot meet the request ends the job, unstarted, with
 * exit code 2 and one line (the report's summary). A bad spelling is PM_E_USAGE with one line
 * naming the option and the value, e.g. "--bind-to corez: unknown object 'corez' (...)".
 *   pm_job_set_map_by:        --map-by slot|node|ppr:N:OBJ|core|hwthread|l3cache|numa|package,
 *                             [:pe=M][:oversubscribe|:nooversubscribe]. slot, node and
 *                             ppr:N:node place ranks across hosts as pm_job_set_mapping does
 *                             (each replaces the other's choice); the object forms place them
 *                             as slot across hosts and by the object within each.
 *   pm_job_set_rank_by:       --rank-by slot|node (across hosts) or hwthread|core|l3cache|numa|
 *                             package (within each host).
 *   pm_job_set_bind_to:       --bind-to none|hwthread|core|l3cache|numa|package[:overload-allowed]
 *   pm_job_set_cpus_per_rank: --cpus-per-rank M ("4")
 *   pm_job_set_gpus_per_rank: --gpus-per-rank N[:shared][:reorder] ("1"): each rank's GPUs, the
 *                             nearest first, as CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES /
 *                             ZE_AFFINITY_MASK.
 * pm_job_set_report_bindings(job, 1): --report-bindings, Open MPI's "MCW rank R bound to ..."
 * line per rank, through the run's on_message (before any rank starts). `on`: 0 or 1. */
PM_C_API int pm_job_set_map_by(pm_job* job, const char* value);
PM_C_API int pm_job_set_rank_by(pm_job* job, const char* value);
PM_C_API int pm_job_set_bind_to(pm_job* job, const char* value);
PM_C_API int pm_job_set_cpus_per_rank(pm_job* job, const char* value);
PM_C_API int pm_job_set_gpus_per_rank(pm_job* job, const char* value);
PM_C_API int pm_job_set_report_bindings(pm_job* job, int on);
/* --stall-timeout (docs/resilience.md, "Stalls"): when no rank of the job used CPU or wrote
 * anything for `seconds` (fractions allowed), the run names every live rank's state through
 * on_message (one line per host: pid, state, kernel wait channel, CPU seconds, time since its
 * last output) and ends the job: exit code 214, cause PM_CAUSE_STALLED. 0 turns it off (the
 * default); negative, not a number, more than a year or a positive value below half a
 * millisecond (it would round to 0: off) is PM_E_USAGE. A launch of the map takes
 * the value the job had when pm_map_job mapped it. */
PM_C_API int pm_job_set_stall_timeout(pm_job* job, double seconds);

/* ---- the rank map: where every rank runs ------------------------------------------------------
 */

/* A map object: a job placed on an allocation (it keeps copies of both), plus the environment
 * its ranks get. */
typedef struct pm_map pm_map;

/* One rank's place, as read by pm_map_placement(). */
typedef struct pm_placement {
  unsigned version;
  uint32_t rank;       /* global rank */
  uint32_t app;        /* its app context */
  uint32_t host;       /* index into the allocation's hosts */
  uint32_t local_rank; /* index among the job's ranks on its host */
  uint32_t local_size; /* the job's ranks on its host */
  uint32_t node;       /* index of its host among the hosts the job uses (NODE_RANK) */
  const char* host_name;
} pm_placement;
#define PM_PLACEMENT_VERSION 1
#define PM_PLACEMENT_INIT \
  { PM_PLACEMENT_VERSION, 0, 0, 0, 0, 0, 0, NULL }

/* Maps the job with Open MPI 4.1's rules. PM_E_MAPPING names the numbers when it does not fit;
 * PM_E_ENV for a bad export; PM_E_ALLOCATION for an app's host that is not in the allocation. */
PM_C_API int pm_map_job(pm_map** out, const pm_job* job, const pm_allocation* allocation);
PM_C_API void pm_map_destroy(pm_map* map);
PM_C_API int pm_map_size(const pm_map* map, uint32_t* out);
PM_C_API int pm_map_node_count(const pm_map* map, uint32_t* out);
/* First rank and number of ranks of app context `app`. */
PM_C_API int pm_map_app_ranks(const pm_map* map, uint32_t app, uint32_t* first, uint32_t* count);
PM_C_API int pm_map_placement(const pm_map* map, uint32_t rank, pm_placement* out);
/* The ranks on allocation host `host`, in rank order: *ranks points into the map (NULL and 0
 * when the job does not use the host). */
PM_C_API int pm_map_ranks_on_host(const pm_map* map, uint32_t host, const uint32_t** ranks,
                                  size_t* count);
/* Open MPI 4.1's --display-map text, and the same as JSON (free with pm_free). */
PM_C_API int pm_map_text(char** out, const pm_map* map, uint32_t jobid);
PM_C_API int pm_map_json(char** out, const pm_map* map, uint32_t jobid);
/* The complete environment rank `rank` starts with, "NAME=value", NULL-terminated (free with
 * pm_strings_free). MASTER_ADDR/MASTER_PORT are decided once per map, at the first call of this or
 * pm_run_start(); a launch of the map gives its ranks exactly these variables. The few whose
 * values only the rank's host's agent decides at launch (its PMIx server's address, its private
 * directories, the PMIx namespace: docs/c-api.md lists them) are there with the value
 * PM_ENV_DECIDED_AT_LAUNCH. */
PM_C_API int pm_rank_env(char*** out, const pm_map* map, uint32_t rank);
#define PM_ENV_DECIDED_AT_LAUNCH "<decided at launch>"
/* pm_rank_env for a rank whose host has the topology `summary`: the text form of the host's
 * summary ("pmtopo1;...", what `pmd --topology` prints on that host). The rank's host is planned
 * with the job's binding options (pm_job_set_bind_to, ...) as a launch plans it, and the rank also
 * gets what that plan gives it: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER,
 * ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK and ZE_ENABLE_PCI_ID_DEVICE_ORDER for its GPUs,
 * NCCL_IB_HCA and UCX_NET_DEVICES for its NIC where the host has several (an -x export or an
 * app's own variable of the same name wins, as at launch). PM_E_PARSE for a summary that cannot
 * be read; PM_E_MAPPING (one line naming the host) when the host cannot meet the options. Its
 * cpus are not variables: `cpus`, if not NULL, receives the rank's cpu list ("2-3"; "" when
 * unbound; free with pm_free). */
PM_C_API int pm_rank_env_on_host(char*** out, char** cpus, const pm_map* map, uint32_t rank,
                                 const char* summary);

/* ---- reports: how a job ended ---------------------------------------------------------------- */

/* A report object: a job's final (or current) state. */
typedef struct pm_report pm_report;

typedef enum pm_rank_state {
  PM_RANK_PENDING = 0,  /* not started yet */
  PM_RANK_RUNNING,      /* started, not ended */
  PM_RANK_EXITED,       /* ended by itself (any code or signal) */
  PM_RANK_KILLED,       /* ended by the job's abort (not a failure) */
  PM_RANK_SPAWN_FAILED, /* could not be started */
  PM_RANK_LOST,         /* its host was lost */
  PM_RANK_NOT_STARTED   /* never started: the job ended before its start went out */
} pm_rank_state;

typedef enum pm_cause {
  PM_CAUSE_NONE = 0,        /* every rank succeeded */
  PM_CAUSE_RANK_FAILED,     /* a rank exited non-zero or was killed by a signal */
  PM_CAUSE_SPAWN_FAILED,    /* a rank could not be started */
  PM_CAUSE_ABORT_REQUESTED, /* a rank called abort, or the job was cancelled */
  PM_CAUSE_HOST_LOST,       /* a host was lost */
  PM_CAUSE_SIGNAL,          /* the launcher received SIGINT/SIGTERM/SIGHUP (pm_run_signal) */
  PM_CAUSE_TIMEOUT,         /* the job's timeout expired */
  PM_CAUSE_STALLED          /* no rank progressed for the stall timeout (exit code 214) */
} pm_cause;

typedef struct pm_report_info {
  unsigned version;
  int exit_code;                /* what pmrun would exit with (docs/exit-codes.md) */
  pm_cause cause;               /* what ended the job */
  int64_t failed_rank;          /* the first failure's rank, -1: none */
  int64_t failed_host;          /* its host (allocation index), -1: none */
  const char* failed_host_name; /* NULL: none */
  int failed_code;              /* its exit code (if it exited) */
  int failed_signal;            /* the signal that killed it, 0: none */
  int signal;                   /* PM_CAUSE_SIGNAL: the signal received */
  const char* summary; /* one human line, e.g. "rank 3 on node2 exited with code 7" ("" if none) */
  uint32_t ranks;      /* job size */
  uint32_t ranks_failed; /* ranks that failed by themselves */
  uint32_t ranks_killed; /* ranks ended by the abort */
} pm_report_info;
#define PM_REPORT_INFO_VERSION 1
#define PM_REPORT_INFO_INIT \
  { PM_REPORT_INFO_VERSION, 0, PM_CAUSE_NONE, -1, -1, NULL, 0, 0, 0, NULL, 0, 0, 0 }

typedef struct pm_rank_info {
  unsigned version;
  uint32_t rank;
  uint32_t host;
  pm_rank_state state;
  int ended;          /* 1: it ended (exit_code / signal are set) */
  int exit_code;      /* its code when it exited */
  int signal;         /* the signal that killed it, 0: none */
  int64_t pid;        /* 0: never started */
  const char* reason; /* why it could not start / its abort message / why its host was lost */
} pm_rank_info;
#define PM_RANK_INFO_VERSION 1
#define PM_RANK_INFO_INIT \
  { PM_RANK_INFO_VERSION, 0, 0, PM_RANK_PENDING, 0, 0, 0, 0, NULL }

/* What a rank was given within its host, read by pm_report_resources(): filled once the job
 * planned its hosts (pm_job_set_bind_to, pm_job_set_gpus_per_rank, ...); all empty for a job
 * that planned nothing, one refused, and ranks of jobs the ranks spawned. */
typedef struct pm_rank_resources {
  unsigned version;
  const char* cpus;     /* the PUs it is bound to as a cpu list ("0-3,8", as Cpus_allowed_list
                         * spells them); "": unbound */
  size_t gpu_count;     /* its GPUs */
  const uint32_t* gpus; /* gpu_count numbers, as its vendor numbers them (CUDA_VISIBLE_DEVICES),
                         * the nearest first; NULL when none */
  const char* nic;      /* its nearest NIC where the host has several ("mlx5_0"); "": none */
} pm_rank_resources;
#define PM_RANK_RESOURCES_VERSION 1
#define PM_RANK_RESOURCES_INIT \
  { PM_RANK_RESOURCES_VERSION, NULL, 0, NULL, NULL }

PM_C_API void pm_report_destroy(pm_report* report);
PM_C_API int pm_report_read(const pm_report* report, pm_report_info* out);
PM_C_API int pm_report_rank(const pm_report* report, uint32_t rank, pm_rank_info* out);
/* Rank `rank`'s cores, GPUs and NIC; the strings and the array live as long as the report. */
PM_C_API int pm_report_resources(const pm_report* report, uint32_t rank, pm_rank_resources* out);
/* How many times the run restarted in place (pm_run_options.max_restarts; 0 without restarts),
 * or with pm_run_options.enable_recovery how many times a rank was started again alone. */
PM_C_API int pm_report_restarts(const pm_report* report, uint32_t* out);
/* The JSON report (schema in docs/failure-semantics.md); free with pm_free. */
PM_C_API int pm_report_json(char** out, const pm_report* report);
/* "rank_failed", "exited", ...: the names the JSON report uses ("unknown" for other values). */
PM_C_API const char* pm_cause_name(pm_cause cause);
PM_C_API const char* pm_rank_state_name(pm_rank_state state);

/* ---- running a job on this machine ----------------------------------------------------------- */

/* A run object: a job being run (and, once finished, its result). The run owns its event loop;
 * it makes progress only inside pm_run_poll(), pm_run_wait() and pm_launch(), on the calling
 * thread, where every callback is called. It installs no signal handler and no SIGCHLD handler:
 * its only child is the agent pmd (found next to the program, or through $PM_AGENT). A process
 * running with descriptor 0, 1 or 2 closed (a daemon) gets /dev/null opened on it by
 * pm_run_start and pm_dvm_start, before they make descriptors of their own: else the first of
 * those would take the number, and output meant for it would be written into it. */
typedef struct pm_run pm_run;

typedef enum pm_stream { PM_STDOUT = 0, PM_STDERR = 1 } pm_stream;
#define PM_LINE_PARTIAL 1u   /* the stream ended without a final newline: its last line */
#define PM_LINE_CONTINUED 2u /* a piece of an over-long line; the next line continues it */

/* One line of a rank's output, without its newline (NUL-terminated; `length` excludes the NUL;
 * valid only during the call). */
typedef void (*pm_output_fn)(uint32_t rank, pm_stream stream, const char* line, size_t length,
                             unsigned flags, void* user_data);
/* A human line from the job (failures, aborts), e.g. "rank 1 on node0 exited with code 7; ...". */
typedef void (*pm_message_fn)(const char* line, void* user_data);
/* A rank changed state (started, ended, ...); `rank` is valid only during the call. */
typedef void (*pm_rank_state_fn)(const pm_rank_info* rank, void* user_data);
/* The job ended; `report` is final and valid only during the call (pm_run_report copies it). */
typedef void (*pm_finish_fn)(const pm_report* report, void* user_data);
/* The job restarts in place (pm_run_options.max_restarts): incarnation `ended` (0, 1, ...) failed
 * with `exit_code` and `summary` (its failure's line, valid only during the call); incarnation
 * ended + 1 starts once every rank of it is gone (docs/resilience.md). */
typedef void (*pm_restart_fn)(uint32_t ended, int exit_code, const char* summary, void* user_data);
/* pm_run_options.enable_recovery: rank `rank` failed (`summary`, valid only during the call) and
 * starts again alone; `count` is its own restart count (1, 2, ...), `number` the run's (restart
 * `number` of max_restarts, every rank together; docs/resilience.md). */
typedef void (*pm_rank_restart_fn)(uint32_t rank, uint32_t count, uint32_t number,
                                   const char* summary, void* user_data);

typedef struct pm_run_options {
  unsigned version;
  int no_abort_on_failure; /* 1: a failing rank does not abort the others */
  uint32_t timeout_ms;     /* end the job after this long (exit code 124); 0: never */
  uint32_t kill_grace_ms;  /* between SIGTERM and SIGKILL in an abort; 0: 3000 */
  int tag_output;          /* prefix "[1,R]<stdout>:" (when written to the descriptors) */
  int merge_stderr;        /* the ranks' stderr is their stdout */
  int stdout_fd;           /* where output goes without on_output (not closed; it must be open:
                              else PM_E_INVALID); a destination that fails later is named once
                              through on_message, and its further output discarded */
  int stderr_fd;
  pm_output_fn on_output; /* if set, lines go here instead of stdout_fd/stderr_fd */
  pm_message_fn on_message;
  /* Called for every change of a rank's state (O(1) each), in the order the job learned them. */
  pm_rank_state_fn on_rank_state;
  pm_finish_fn on_finish;
  void* user_data;        /* passed to every callback */
  const char* agent_path; /* pmd; NULL: $PM_AGENT, next to the program or libpm-c, or $PATH */
  /* Version 2: restarts in place (pmrun --max-restarts, docs/resilience.md). On a failure every
   * rank stops, then the whole job starts again on the same agents, up to max_restarts times for
   * the run (0: never); the report's exit code is the last incarnation's. */
  uint32_t max_restarts;
  pm_restart_fn on_restart; /* NULL: not told (on_message still gets the restart's line) */
  /* Version 3: recovery of single ranks (pmrun --enable-recovery, docs/resilience.md). 1: a
   * failed rank starts again alone while the others run on, up to max_restarts times for the
   * run (every rank together); the whole job never restarts. With max_restarts 0 no rank
   * restarts and a failure does not abort the others (as no_abort_on_failure). */
  int enable_recovery;
  pm_rank_restart_fn on_rank_restart; /* NULL: not told (on_message gets the line) */
} pm_run_options;
#define PM_RUN_OPTIONS_VERSION 3
#define PM_RUN_OPTIONS_INIT                                                                      \
  {                                                                                              \
    PM_RUN_OPTIONS_VERSION, 0, 0, 0, 0, 0, 1, 2, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, \
        NULL                                                                                     \
  }

/* Checks and starts the job: every app's program is resolved first (PM_E_NOT_FOUND,
 * PM_E_NOT_EXECUTABLE: nothing starts). The local transport runs jobs whose ranks are all on the
 * allocation's FIRST host, and that host is this machine (localhost, its hostname, or
 * pm_allocation_local()); any other map is PM_E_LAUNCH naming the first rank elsewhere. Ranks
 * start inside pm_run_poll/wait. */
PM_C_API int pm_run_start(pm_run** out, const pm_map* map, const pm_run_options* options);
/* Runs the job's event loop for up to `timeout_ms` (0: only what is ready, at most 256 handlers
 * of it or about 5 ms of them, so that ranks writing without pause cannot hold the thread; -1:
 * until the job ends);
 * *finished = 1 once the job ended and its on_finish was called. */
PM_C_API int pm_run_poll(pm_run* run, int timeout_ms, int* finished);
/* Runs the job to its end; *exit_code (may be NULL) = the report's exit code. */
PM_C_API int pm_run_wait(pm_run* run, int* exit_code);
/* Tells the job its launcher received `signo`: SIGINT/SIGTERM/SIGHUP abort it (a second one
 * escalates to SIGKILL), SIGUSR1/SIGUSR2/SIGTSTP/SIGCONT are forwarded to every rank; any other
 * signal is PM_E_USAGE (to kill the job use pm_run_cancel, or send SIGINT twice). May be
 * called from any thread (not from a signal handler); takes effect in the next poll/wait. */
PM_C_API int pm_run_signal(pm_run* run, int signo);
/* Aborts the job as cancelled (SIGTERM, SIGKILL after the grace). Any thread, like pm_run_signal.
 * The job then ends with exit code 1, cause PM_CAUSE_ABORT_REQUESTED, failed_rank -1 and the
 * summary "the job was cancelled: cancelled" (unless a failure, signal or timeout came first
 * and decided). */
PM_C_API int pm_run_cancel(pm_run* run);
PM_C_API int pm_run_finished(const pm_run* run, int* out);
/* A copy of the report: final once finished, the state so far before. */
PM_C_API int pm_run_report(pm_report** out, const pm_run* run);
/* Frees the run. A job still running is cancelled first and run to its end (every rank and what
 * it left behind): this blocks until the ranks are gone, at most about the kill grace when a rank
 * ignores SIGTERM (milliseconds otherwise). Output that still cannot be written a second after
 * the grace (a pipe nobody reads) is let go: its bytes are dropped, the count said through
 * on_message. From inside one of the run's own callbacks it does nothing (the run stays valid):
 * destroy it after pm_run_poll/pm_run_wait returned. */
PM_C_API void pm_run_destroy(pm_run* run);
/* pm_run_start + pm_run_wait + pm_run_report + pm_run_destroy. */
PM_C_API int pm_launch(pm_report** out, const pm_map* map, const pm_run_options* options);

/* ---- a DVM: agents kept across jobs (docs/dvm.md) ------------------------------------------- */

/* A DVM object: one daemon per host of an allocation, kept for many jobs (as PRRTE's `prte`). Its
 * server runs on a thread of its own in the calling process, so that it ends with the process:
 * nothing it started outlives it. Jobs reach it through its URI, from this process
 * (pm_dvm_run_start) or from others of the same user (pmrun --dvm-uri URI). */
typedef struct pm_dvm pm_dvm;

typedef struct pm_dvm_options {
  unsigned version;
  const char* rsh_agent;    /* how other hosts are reached: words separated by blanks, no quoting
                               ("ssh -F /etc/cfg"); NULL: "ssh" */
  const char* agent_path;   /* pmd; NULL: as pm_run_options.agent_path */
  uint32_t idle_timeout_ms; /* no job this long: the DVM stops by itself (0: never) */
  pm_message_fn on_message; /* the DVM's lines (a host lost, a caller refused); NULL: none.
                               Called on the DVM's thread. */
  void* user_data;
} pm_dvm_options;
#define PM_DVM_OPTIONS_VERSION 1
#define PM_DVM_OPTIONS_INIT \
  { PM_DVM_OPTIONS_VERSION, NULL, NULL, 0, NULL, NULL }

/* Starts a daemon on every host of `hosts` and returns once each one answered (PM_E_LAUNCH when
 * none did, naming each host's problem; hosts that did not are left out and named through
 * on_message). The DVM's socket lives in a new directory only this user may enter. */
PM_C_API int pm_dvm_start(pm_dvm** out, const pm_allocation* hosts, const pm_dvm_options* options);
/* Its URI ("unix:PATH"), for pm_dvm_run_start and `pmrun --dvm-uri`; free with pm_free. */
PM_C_API int pm_dvm_uri(const pm_dvm* dvm, char** out);
/* 1 while the DVM runs (0 once it stopped: idle, every host lost). */
PM_C_API int pm_dvm_running(const pm_dvm* dvm, int* out);
/* Stops the DVM (every job on it ends with its agents) and frees it; blocks until every daemon
 * ended, a few seconds at most. From inside the DVM's own on_message (its thread) it does nothing:
 * the DVM stays valid; destroy it from another thread. */
PM_C_API void pm_dvm_destroy(pm_dvm* dvm);

/* Runs `job` on the DVM at `uri`: maps it on the DVM's free slots and holds them for the run's
 * life. When they are taken by other jobs it waits for them with `wait` = 1, or fails with
 * PM_E_MAPPING naming what is free; a job larger than the whole DVM fails at once. Waiting
 * blocks the calling thread: runs it drives that hold the slots make no progress meanwhile, so
 * finish those first (or wait = 0; examples/dvm_scheduler.c). Then as pm_run_start: the same
 * options, callbacks and report. */
PM_C_API int pm_dvm_run_start(pm_run** out, const char* uri, const pm_job* job, int wait,
                              const pm_run_options* options);
/* pm_dvm_run_start + pm_run_wait + pm_run_report + pm_run_destroy. */
PM_C_API int pm_dvm_launch(pm_report** out, const char* uri, const pm_job* job, int wait,
                           const pm_run_options* options);

/* ---- the simulator: a virtual cluster, the real controller and agents ----------------------- */

/* A simulation object: a scenario (cluster, job, process scripts, faults, seed) that can be run,
 * deterministically, any number of times (docs/simulator.md). Hosts are "node0".."nodeN-1". */
typedef struct pm_sim pm_sim;
/* A simulation result object: the verdict, the job's report, the trace hash, the replay command. */
typedef struct pm_sim_result pm_sim_result;

typedef enum pm_sim_verdict {
  PM_SIM_OK = 0,      /* the job finished and every check of the contract held */
  PM_SIM_CORRECTNESS, /* the job went against the contract */
  PM_SIM_LIVENESS,    /* the job did not finish */
  PM_SIM_CRASH        /* the controller, an agent or the world failed */
} pm_sim_verdict;

typedef struct pm_sim_options {
  unsigned version;
  uint32_t hosts; /* hosts node0..nodeN-1 */
  uint32_t slots; /* slots per host */
  int64_t np;     /* ranks, or PM_NP_PER_SLOT */
  pm_map_by map_by;
  uint32_t ppr;
  int oversubscribe; /* 0 or 1 */
  uint64_t seed;
  int no_abort_on_failure;
  uint32_t kill_grace_ms;     /* 0: 3000 */
  uint32_t timeout_ms;        /* 0: none */
  const char* default_script; /* every rank's script unless set per rank; NULL: "exit:0" */
} pm_sim_options;
#define PM_SIM_OPTIONS_VERSION 1
#define PM_SIM_OPTIONS_INIT \
  { PM_SIM_OPTIONS_VERSION, 4, 2, PM_NP_PER_SLOT, PM_MAP_BY_SLOT, 0, 0, 1, 0, 0, 0, NULL }

/* One line of the readable trace (NUL-terminated, valid during the call). */
typedef void (*pm_trace_fn)(const char* line, size_t length, void* user_data);
/* A simulated rank was started on host `host`. */
typedef void (*pm_spawn_fn)(uint32_t rank, uint32_t host, void* user_data);

typedef struct pm_sim_run_options {
  unsigned version;
  pm_trace_fn trace; /* NULL: no trace is formatted */
  pm_spawn_fn on_spawn;
  void* user_data;
  uint64_t max_events; /* a run needing more is a liveness failure; 0: the default budget */
} pm_sim_run_options;
#define PM_SIM_RUN_OPTIONS_VERSION 1
#define PM_SIM_RUN_OPTIONS_INIT \
  { PM_SIM_RUN_OPTIONS_VERSION, NULL, NULL, NULL, 0 }

typedef struct pm_sim_result_info {
  unsigned version;
  pm_sim_verdict verdict;
  int finished;           /* the job finished */
  uint64_t trace_hash;    /* equal for equal scenarios and seeds */
  int64_t finish_time_ns; /* virtual time of the job's end */
  uint64_t events;        /* world events processed */
  size_t problems;        /* pm_sim_result_problem() lines (0 when the verdict is ok) */
  size_t lines;           /* pm_sim_result_line(): the human lines the job emitted */
  const char* replay;     /* the pmsim command that replays this run */
} pm_sim_result_info;
#define PM_SIM_RESULT_INFO_VERSION 1
#define PM_SIM_RESULT_INFO_INIT \
  { PM_SIM_RESULT_INFO_VERSION, PM_SIM_OK, 0, 0, 0, 0, 0, 0, NULL }

/* PM_E_USAGE for a bad default script. */
PM_C_API int pm_sim_new(pm_sim** out, const pm_sim_options* options);
PM_C_API void pm_sim_destroy(pm_sim* sim);
/* Rank `rank` runs `script`: "exit:7@1s", "signal:9@2s", "hang", "abort:3@1s",
 * "exit:0@5s+ignore-term", ... (PM_E_USAGE names a bad one). */
PM_C_API int pm_sim_set_script(pm_sim* sim, uint32_t rank, const char* script);
/* Adds a fault: "crash:3@1s", "partition:3@1s-5s", "spawn-fail:12", "agent-fail:3",
 * "lost-exit:12" (PM_E_USAGE names a bad one). */
PM_C_API int pm_sim_add_fault(pm_sim* sim, const char* fault);
/* pm_job_set_stall_timeout for the simulated job (a "stall:R@T" fault stops rank R at T). */
PM_C_API int pm_sim_set_stall_timeout(pm_sim* sim, double seconds);
/* "build/bin/pmsim --hosts 64 ...": the command that runs this scenario (free with pm_free). */
PM_C_API int pm_sim_replay_command(char** out, const pm_sim* sim);
/* Runs the scenario. A job that does not fit, or a fault or script naming a missing host or
 * rank, is an error (PM_E_MAPPING, PM_E_USAGE); what goes wrong during the run is in the result. */
PM_C_API int pm_sim_run(pm_sim_result** out, const pm_sim* sim, const pm_sim_run_options* options);
PM_C_API void pm_sim_result_destroy(pm_sim_result* result);
PM_C_API int pm_sim_result_read(const pm_sim_result* result, pm_sim_result_info* out);
PM_C_API int pm_sim_result_problem(const pm_sim_result* result, size_t index, const char** out);
PM_C_API int pm_sim_result_line(const pm_sim_result* result, size_t index, const char** out);
/* A copy of the simulated job's report. */
PM_C_API int pm_sim_result_report(pm_report** out, const pm_sim_result* result);
/* Seed, verdict, problems and the replay command, as one message (free with pm_free). */
PM_C_API int pm_sim_result_explain(char** out, const pm_sim_result* result);
PM_C_API const char* pm_sim_verdict_name(pm_sim_verdict verdict);

#ifdef __cplusplus
}
#endif

#endif /* PM_PM_H */
