/* pubsub: a PMIx client for the server's publish/lookup, connect and spawned-job facts.
 *   pmix_pubsub publish KEY      publishes KEY (a string), KEY.int (int32 -7) and KEY.bytes
 *                                (a byte object 01 02 00 03)
 *   pmix_pubsub lookup KEY [wait]  looks the three up (PMIX_WAIT: until they are published)
 *   pmix_pubsub unpublish KEY
 *   pmix_pubsub connect NSPACE   PMIx_Connect of its own namespace and NSPACE (all ranks)
 *   pmix_pubsub info             PMIX_SPAWNED and PMIX_PARENT_ID of its job
 * Output: "published KEY", "found KEY = value-of-KEY from NS:R", "found KEY.int = -7",
 * "found KEY.bytes = 01 02 00 03", "lookup KEY: STATUS", "connect: STATUS",
 * "spawned 0|1 parent NS:R|none". Exit 0, or 4 when a PMIx call failed (its status printed). */
#include <pmix.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int publish(const char* key) {
  pmix_info_t info[3];
  char name[PMIX_MAX_KEYLEN + 1], value[PMIX_MAX_KEYLEN + 16];
  int32_t number = -7;
  char bytes[4] = {1, 2, 0, 3};
  pmix_byte_object_t bo = {bytes, sizeof bytes};
  snprintf(value, sizeof value, "value-of-%s", key);
  PMIX_INFO_LOAD(&info[0], key, value, PMIX_STRING);
  snprintf(name, sizeof name, "%s.int", key);
  PMIX_INFO_LOAD(&info[1], name, &number, PMIX_INT32);
  snprintf(name, sizeof name, "%s.bytes", key);
  PMIX_INFO_LOAD(&info[2], name, &bo, PMIX_BYTE_OBJECT);
  const pmix_status_t rc = PMIx_Publish(info, 3);
  printf(rc == PMIX_SUCCESS ? "published %s\n" : "publish %s: %s\n", key, PMIx_Error_string(rc));
  return rc == PMIX_SUCCESS ? 0 : 4;
}

static int lookup(const char* key, int wait) {
  pmix_pdata_t data[3];
  PMIX_PDATA_CONSTRUCT(&data[0]);
  PMIX_PDATA_CONSTRUCT(&data[1]);
  PMIX_PDATA_CONSTRUCT(&data[2]);
  PMIX_LOAD_KEY(data[0].key, key);
  char name[PMIX_MAX_KEYLEN + 1];
  snprintf(name, sizeof name, "%s.int", key);
  PMIX_LOAD_KEY(data[1].key, name);
  snprintf(name, sizeof name, "%s.bytes", key);
  PMIX_LOAD_KEY(data[2].key, name);
  pmix_info_t info[2];
  int all = 0, timeout = 60;
  PMIX_INFO_LOAD(&info[0], PMIX_WAIT, &all, PMIX_INT); /* 0: all keys */
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
  const pmix_status_t rc = PMIx_Lookup(data, 3, wait ? info : NULL, wait ? 2 : 0);
  if (rc != PMIX_SUCCESS) {
    printf("lookup %s: %s\n", key, PMIx_Error_string(rc));
    return 4;
  }
  if (data[0].value.type == PMIX_STRING) {
    printf("found %s = %s from %s:%u\n", data[0].key, data[0].value.data.string,
           data[0].proc.nspace, data[0].proc.rank);
  }
  if (data[1].value.type == PMIX_INT32) {
    printf("found %s = %d\n", data[1].key, (int)data[1].value.data.int32);
  }
  if (data[2].value.type == PMIX_BYTE_OBJECT) {
    printf("found %s =", data[2].key);
    for (size_t i = 0; i < data[2].value.data.bo.size; ++i) {
      printf(" %02x", (unsigned char)data[2].value.data.bo.bytes[i]);
    }
    printf("\n");
  }
  for (int i = 0; i < 3; ++i) PMIX_PDATA_DESTRUCT(&data[i]);
  return 0;
}

static int unpublish(const char* key) {
  char* keys[] = {(char*)key, NULL};
  const pmix_status_t rc = PMIx_Unpublish(keys, NULL, 0);
  printf("unpublish %s: %s\n", key, PMIx_Error_string(rc));
  return rc == PMIX_SUCCESS ? 0 : 4;
}

static int connect_to(const pmix_proc_t* me, const char* other) {
  pmix_proc_t procs[2];
  PMIX_PROC_LOAD(&procs[0], me->nspace, PMIX_RANK_WILDCARD);
  PMIX_PROC_LOAD(&procs[1], other, PMIX_RANK_WILDCARD);
  const pmix_status_t rc = PMIx_Connect(procs, 2, NULL, 0);
  printf("connect: %s\n", PMIx_Error_string(rc));
  return rc == PMIX_SUCCESS ? 0 : 4;
}

static int info(const pmix_proc_t* me) {
  pmix_proc_t job;
  PMIX_PROC_LOAD(&job, me->nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* v = NULL;
  int spawned = 0;
  if (PMIx_Get(&job, PMIX_SPAWNED, NULL, 0, &v) == PMIX_SUCCESS) {
    spawned = v->type == PMIX_BOOL && v->data.flag;
    PMIX_VALUE_RELEASE(v);
  }
  printf("spawned %d parent ", spawned);
  if (PMIx_Get(&job, PMIX_PARENT_ID, NULL, 0, &v) == PMIX_SUCCESS) {
    if (v->type == PMIX_PROC) printf("%s:%u\n", v->data.proc->nspace, v->data.proc->rank);
    PMIX_VALUE_RELEASE(v);
  } else {
    printf("none\n");
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: pmix_pubsub publish|lookup|unpublish|connect|info [ARG [wait]]\n");
    return 2;
  }
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "pubsub: PMIx_Init failed\n");
    return 1;
  }
  const char* arg = argc > 2 ? argv[2] : "";
  int rc = 2;
  if (strcmp(argv[1], "publish") == 0) {
    rc = publish(arg);
  } else if (strcmp(argv[1], "lookup") == 0) {
    rc = lookup(arg, argc > 3 && strcmp(argv[3], "wait") == 0);
  } else if (strcmp(argv[1], "unpublish") == 0) {
    rc = unpublish(arg);
  } else if (strcmp(argv[1], "connect") == 0) {
    rc = connect_to(&me, arg);
  } else if (strcmp(argv[1], "info") == 0) {
    rc = info(&me);
  }
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return rc;
}
