/* A rank that reads the env contract: the same numbers under every framework's names.
 * Run it under pmrun: pmrun --allow-run-as-root -np 4 build/examples/read_env */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* get(const char* name) {
  const char* v = getenv(name);
  return v ? v : "(unset)";
}

int main(void) {
  const char* rank = get("OMPI_COMM_WORLD_RANK");
  int agree = strcmp(rank, get("RANK")) == 0 && strcmp(rank, get("PMI_RANK")) == 0 &&
              strcmp(rank, get("SLURM_PROCID")) == 0;
  printf("rank %s of %s: local %s of %s, node %s, master %s:%s, names agree: %s\n", rank,
         get("OMPI_COMM_WORLD_SIZE"), get("LOCAL_RANK"), get("LOCAL_WORLD_SIZE"), get("NODE_RANK"),
         get("MASTER_ADDR"), get("MASTER_PORT"), agree ? "yes" : "NO");
  return agree ? 0 : 1;
}
