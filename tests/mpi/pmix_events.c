/* events: a PMIx client that registers a handler for the events pmrun sends where the abort
 * policy is off (docs/pmix.md, "Events"), meets every rank in a fence, then rank VICTIM ends as
 * HOW says while the others wait up to WAIT seconds (default 30) for an event and print it.
 *   pmix_events VICTIM HOW [WAIT [ignore-term] [no-fence]]
 *   HOW: exit:N       PMIx_Finalize, then exit with N
 *        raw-exit:N   exit with N without PMIx_Finalize
 *        signal:S     PMIx_Finalize, then kill itself with signal S
 *        stay         like the others (for a victim killed from outside: kill -9 <pid>)
 *   ignore-term: every rank ignores SIGTERM, so that a notice that the job is being ended (sent
 *   right before the SIGTERM) is seen; the grace's SIGKILL still ends a rank that stays.
 *   no-fence: no fence after registering (for jobs where some ranks never call PMIx; the server
 *   keeps events for handlers registered late).
 * Output: "ready rank R pid P" after the fence; per event
 *   "event rank R: <PMIx code name> affected=A[,B...] exit_code=N host=H terminate=0|1 text=T"
 * (fields the event lacks print as "-"). A rank that waited in vain prints "no event rank R" and
 * exits 4; one that got an event finalizes and exits 0. */
#include <pmix.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int events_seen = 0;
static int registered = 0;
static pmix_status_t registration = PMIX_SUCCESS;
static pmix_proc_t me;

static void append(char* buf, size_t size, const char* text) {
  const size_t used = strlen(buf);
  if (used + 1 < size) snprintf(buf + used, size - used, "%s", text);
}

/* Runs on PMIx's progress thread. */
static void on_event(size_t id, pmix_status_t status, const pmix_proc_t* source, pmix_info_t info[],
                     size_t ninfo, pmix_info_t results[], size_t nresults,
                     pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
  (void)id;
  (void)source;
  (void)results;
  (void)nresults;
  char affected[512] = "", code[32] = "-", host[256] = "-", text[512] = "-";
  int terminate = 0;
  for (size_t i = 0; i < ninfo; ++i) {
    const pmix_info_t* in = &info[i];
    char one[32];
    if (PMIX_CHECK_KEY(in, PMIX_EVENT_AFFECTED_PROC)) {
      snprintf(one, sizeof one, "%u", in->value.data.proc->rank);
      append(affected, sizeof affected, one);
    } else if (PMIX_CHECK_KEY(in, PMIX_EVENT_AFFECTED_PROCS)) {
      const pmix_data_array_t* a = in->value.data.darray;
      const pmix_proc_t* procs = (const pmix_proc_t*)a->array;
      for (size_t k = 0; k < a->size; ++k) {
        snprintf(one, sizeof one, "%s%u", k == 0 ? "" : ",", procs[k].rank);
        append(affected, sizeof affected, one);
      }
    } else if (PMIX_CHECK_KEY(in, PMIX_EXIT_CODE)) {
      snprintf(code, sizeof code, "%d", in->value.data.integer);
    } else if (PMIX_CHECK_KEY(in, PMIX_HOSTNAME)) {
      snprintf(host, sizeof host, "%s", in->value.data.string);
    } else if (PMIX_CHECK_KEY(in, PMIX_EVENT_TEXT_MESSAGE)) {
      snprintf(text, sizeof text, "%s", in->value.data.string);
    } else if (PMIX_CHECK_KEY(in, PMIX_EVENT_TERMINATE_JOB)) {
      terminate = PMIX_INFO_TRUE(in) ? 1 : 0;
    }
  }
  printf("event rank %u: %s affected=%s exit_code=%s host=%s terminate=%d text=%s\n", me.rank,
         PMIx_Error_string(status), affected[0] ? affected : "-", code, host, terminate, text);
  fflush(stdout);
  pthread_mutex_lock(&lock);
  ++events_seen;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
  if (cbfunc != NULL) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static void on_registered(pmix_status_t status, size_t id, void* cbdata) {
  (void)id;
  (void)cbdata;
  pthread_mutex_lock(&lock);
  registration = status;
  registered = 1;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: pmix_events VICTIM HOW [WAIT [ignore-term] [no-fence]]\n");
    return 2;
  }
  const unsigned victim = (unsigned)atoi(argv[1]);
  const char* how = argv[2];
  const int wait_s = argc > 3 ? atoi(argv[3]) : 30;
  int fence = 1;
  for (int i = 4; i < argc; ++i) {
    if (strcmp(argv[i], "ignore-term") == 0) signal(SIGTERM, SIG_IGN);
    if (strcmp(argv[i], "no-fence") == 0) fence = 0;
  }
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "events: PMIx_Init failed\n");
    return 1;
  }
  pmix_status_t codes[] = {PMIX_ERR_EXIT_NONZERO_TERM,    PMIX_ERR_PROC_ABORTED_BY_SIG,
                           PMIX_ERR_PROC_FAILED_TO_START, PMIX_EVENT_NODE_DOWN,
                           PMIX_ERR_PROC_REQUESTED_ABORT, PMIX_ERR_JOB_CANCELED,
                           PMIX_ERR_PROC_TERM_WO_SYNC};
  PMIx_Register_event_handler(codes, sizeof codes / sizeof codes[0], NULL, 0, on_event,
                              on_registered, NULL);
  pthread_mutex_lock(&lock);
  while (!registered) pthread_cond_wait(&changed, &lock);
  pthread_mutex_unlock(&lock);
  if (registration != PMIX_SUCCESS) {
    fprintf(stderr, "events: registering the handler failed: %s\n",
            PMIx_Error_string(registration));
    return 1;
  }
  /* Every rank has its handler before the victim acts. */
  if (fence && PMIx_Fence(NULL, 0, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "events: PMIx_Fence failed\n");
    return 1;
  }
  printf("ready rank %u pid %d\n", me.rank, (int)getpid());
  fflush(stdout);
  if (me.rank == victim && strncmp(how, "exit:", 5) == 0) {
    PMIx_Finalize(NULL, 0);
    return atoi(how + 5);
  }
  if (me.rank == victim && strncmp(how, "raw-exit:", 9) == 0) _exit(atoi(how + 9));
  if (me.rank == victim && strncmp(how, "signal:", 7) == 0) {
    PMIx_Finalize(NULL, 0);
    const int signo = atoi(how + 7);
    signal(signo, SIG_DFL);
    raise(signo);
    return 1;
  }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += wait_s;
  pthread_mutex_lock(&lock);
  while (events_seen == 0) {
    if (pthread_cond_timedwait(&changed, &lock, &until) != 0) break;
  }
  const int got = events_seen;
  pthread_mutex_unlock(&lock);
  if (got == 0) {
    printf("no event rank %u\n", me.rank);
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return 4;
  }
  usleep(200 * 1000); /* a second notice (another failure) may follow */
  PMIx_Finalize(NULL, 0);
  return 0;
}
