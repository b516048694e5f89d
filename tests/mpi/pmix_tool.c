/* A PMIx tool that attaches to a running job's agent (docs/pmix.md, "Tools"): asks its server for
 * the namespaces, the job's size and process table, this host's part of it and what spawn
 * supports, a namespace that does not exist, then spawns a job.
 *   pmix_tool --uri URI              the server's PMIX_SERVER_URI (pmrun --ps PID --json: pmix_uri)
 *   pmix_tool --pid PID --tmpdir DIR the agent's pid and PMIx tmpdir (agents: pid, pmix_tmpdir)
 *   ... [--spawn PROGRAM] [--np N] [--arg WORD]...
 *                                    what PMIx_Spawn starts: N (default 1) ranks of PROGRAM
 *                                    (default /bin/true) with the WORDs as arguments
 * Output, one line each:
 *   tool NSPACE RANK                                  (the tool's own name, from its server)
 *   namespaces NS[,NS...]
 *   job_size N
 *   proc NSPACE RANK HOST EXECUTABLE PID STATE EXIT   (the whole job, PMIX_QUERY_PROC_TABLE)
 *   local NSPACE RANK HOST EXECUTABLE PID STATE EXIT  (PMIX_QUERY_LOCAL_PROC_TABLE)
 *   spawn_support '...'
 *   unknown_nspace STATUS                             (the proc table of "no-such-job")
 *   unsupported STATUS                                (PMIX_QUERY_MEMORY_USAGE)
 *   mixed STATUS namespaces|-                         (one answered key and one not)
 *   spawn STATUS                                      (PMIx_Spawn)
 *   spawned NSPACE                                    (its namespace, when it succeeded)
 * A query that fails prints "KEY error STATUS"; exit 0 when the tool could attach, else 1. */
#include <pmix_tool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pmix_status_t query(const char* key, const char* nspace, pmix_info_t** info, size_t* ninfo) {
  pmix_query_t q;
  PMIX_QUERY_CONSTRUCT(&q);
  q.keys = (char**)calloc(2, sizeof(char*));
  q.keys[0] = strdup(key);
  if (nspace != NULL) {
    PMIX_QUERY_QUALIFIERS_CREATE(&q, 1);
    PMIX_INFO_LOAD(&q.qualifiers[0], PMIX_NSPACE, nspace, PMIX_STRING);
  }
  *info = NULL;
  *ninfo = 0;
  pmix_status_t rc = PMIx_Query_info(&q, 1, info, ninfo);
  PMIX_QUERY_DESTRUCT(&q);
  return rc;
}

static const pmix_info_t* find(const pmix_info_t* info, size_t n, const char* key) {
  for (size_t i = 0; i < n; ++i) {
    if (PMIX_CHECK_KEY(&info[i], key)) return &info[i];
  }
  return NULL;
}

static void print_table(const char* label, const char* key, const char* nspace) {
  pmix_info_t* info;
  size_t n;
  pmix_status_t rc = query(key, nspace, &info, &n);
  const pmix_info_t* t = find(info, n, key);
  if (rc != PMIX_SUCCESS || t == NULL || t->value.type != PMIX_DATA_ARRAY ||
      t->value.data.darray == NULL || t->value.data.darray->type != PMIX_PROC_INFO) {
    printf("%s error %s\n", label, PMIx_Error_string(rc != PMIX_SUCCESS ? rc : PMIX_ERR_BAD_PARAM));
  } else {
    const pmix_data_array_t* a = t->value.data.darray;
    const pmix_proc_info_t* p = (const pmix_proc_info_t*)a->array;
    for (size_t i = 0; i < a->size; ++i) {
      printf("%s %s %u %s %s %d %s %d\n", label, p[i].proc.nspace, p[i].proc.rank,
             p[i].hostname ? p[i].hostname : "-", p[i].executable_name ? p[i].executable_name : "-",
             (int)p[i].pid, PMIx_Proc_state_string(p[i].state), p[i].exit_code);
    }
  }
  if (info != NULL) PMIX_INFO_FREE(info, n);
}

int main(int argc, char** argv) {
  const char *uri = NULL, *pid = NULL, *tmpdir = NULL, *program = "/bin/true";
  int np = 1, nargs = 0;
  const char* args[16];
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--uri") == 0) uri = argv[i + 1];
    if (strcmp(argv[i], "--pid") == 0) pid = argv[i + 1];
    if (strcmp(argv[i], "--tmpdir") == 0) tmpdir = argv[i + 1];
    if (strcmp(argv[i], "--spawn") == 0) program = argv[i + 1];
    if (strcmp(argv[i], "--np") == 0) np = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--arg") == 0 && nargs < 16) args[nargs++] = argv[i + 1];
  }
  if (uri == NULL && (pid == NULL || tmpdir == NULL)) {
    fprintf(stderr,
            "usage: pmix_tool --uri URI | --pid PID --tmpdir DIR [--spawn PROGRAM] [--np N] "
            "[--arg WORD]...\n");
    return 2;
  }
  pmix_info_t init[3];
  size_t ninit = 0;
  if (uri != NULL) {
    PMIX_INFO_LOAD(&init[ninit], PMIX_SERVER_URI, uri, PMIX_STRING);
    ++ninit;
  } else {
    pid_t server = (pid_t)atol(pid);
    PMIX_INFO_LOAD(&init[ninit], PMIX_SERVER_PIDINFO, &server, PMIX_PID);
    ++ninit;
    PMIX_INFO_LOAD(&init[ninit], PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
    ++ninit;
  }
  pmix_proc_t me;
  pmix_status_t rc = PMIx_tool_init(&me, init, ninit);
  if (rc != PMIX_SUCCESS) {
    printf("attach error %s\n", PMIx_Error_string(rc));
    return 1;
  }
  printf("tool %s %u\n", me.nspace, me.rank);

  pmix_info_t* info;
  size_t n;
  char nspace[PMIX_MAX_NSLEN + 1] = "";
  rc = query(PMIX_QUERY_NAMESPACES, NULL, &info, &n);
  const pmix_info_t* ns = find(info, n, PMIX_QUERY_NAMESPACES);
  if (rc == PMIX_SUCCESS && ns != NULL && ns->value.type == PMIX_STRING) {
    printf("namespaces %s\n", ns->value.data.string);
    strncpy(nspace, ns->value.data.string, PMIX_MAX_NSLEN);
    char* comma = strchr(nspace, ',');
    if (comma != NULL) *comma = '\0';
  } else {
    printf("namespaces error %s\n", PMIx_Error_string(rc));
  }
  if (info != NULL) PMIX_INFO_FREE(info, n);

  rc = query(PMIX_JOB_SIZE, nspace, &info, &n);
  const pmix_info_t* size = find(info, n, PMIX_JOB_SIZE);
  if (rc == PMIX_SUCCESS && size != NULL && size->value.type == PMIX_UINT32) {
    printf("job_size %u\n", size->value.data.uint32);
  } else {
    printf("job_size error %s\n", PMIx_Error_string(rc));
  }
  if (info != NULL) PMIX_INFO_FREE(info, n);

  print_table("proc", PMIX_QUERY_PROC_TABLE, nspace);
  print_table("local", PMIX_QUERY_LOCAL_PROC_TABLE, nspace);

  rc = query(PMIX_QUERY_SPAWN_SUPPORT, NULL, &info, &n);
  const pmix_info_t* spawn = find(info, n, PMIX_QUERY_SPAWN_SUPPORT);
  if (rc == PMIX_SUCCESS && spawn != NULL && spawn->value.type == PMIX_STRING) {
    printf("spawn_support '%s'\n", spawn->value.data.string ? spawn->value.data.string : "");
  } else {
    printf("spawn_support error %s\n", PMIx_Error_string(rc));
  }
  if (info != NULL) PMIX_INFO_FREE(info, n);

  rc = query(PMIX_QUERY_PROC_TABLE, "no-such-job", &info, &n);
  printf("unknown_nspace %s\n", PMIx_Error_string(rc));
  if (info != NULL) PMIX_INFO_FREE(info, n);

  rc = query(PMIX_QUERY_MEMORY_USAGE, nspace, &info, &n);
  printf("unsupported %s\n", PMIx_Error_string(rc));
  if (info != NULL) PMIX_INFO_FREE(info, n);

  /* One query of a key answered and one not. */
  pmix_query_t mixed;
  PMIX_QUERY_CONSTRUCT(&mixed);
  mixed.keys = (char**)calloc(3, sizeof(char*));
  mixed.keys[0] = strdup(PMIX_QUERY_NAMESPACES);
  mixed.keys[1] = strdup(PMIX_QUERY_MEMORY_USAGE);
  info = NULL;
  n = 0;
  rc = PMIx_Query_info(&mixed, 1, &info, &n);
  printf("mixed %s %s\n", PMIx_Error_string(rc),
         find(info, n, PMIX_QUERY_NAMESPACES) != NULL ? "namespaces" : "-");
  PMIX_QUERY_DESTRUCT(&mixed);
  if (info != NULL) PMIX_INFO_FREE(info, n);

  pmix_app_t app;
  PMIX_APP_CONSTRUCT(&app);
  app.cmd = strdup(program);
  app.argv = (char**)calloc((size_t)nargs + 2, sizeof(char*));
  app.argv[0] = strdup(program);
  for (int i = 0; i < nargs; ++i) app.argv[i + 1] = strdup(args[i]);
  app.maxprocs = np;
  pmix_nspace_t child;
  rc = PMIx_Spawn(NULL, 0, &app, 1, child);
  printf("spawn %s\n", PMIx_Error_string(rc));
  if (rc == PMIX_SUCCESS) printf("spawned %s\n", child);
  PMIX_APP_DESTRUCT(&app);

  fflush(stdout);
  PMIx_tool_finalize();
  return 0;
}
