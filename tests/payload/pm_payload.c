/* pm_payload: the program the integration tests and benchmarks run as ranks.
 * It executes its arguments as a script of steps, left to right:
 *   exit N                 exit with code N
 *   kill SIG               send itself signal SIG (a number) with default disposition
 *   sleep SECONDS          sleep (fractions allowed)
 *   ignore-term            ignore SIGTERM from now on
 *   echo TEXT              write TEXT and a newline to stdout
 *   echo-err TEXT          ... to stderr
 *   partial TEXT           write TEXT without a newline to stdout
 *   env NAME               print NAME=value (or NAME unset)
 *   env-all                print the whole environment, one NAME=value per line
 *   flood BYTES CHUNK      write BYTES of 100-byte lines "r<RANK> l<N> xxx...\n" in CHUNK-byte
 *                          writes (chunks do not end at line ends)
 *   grandchild SECONDS     fork a child that sleeps SECONDS; print "grandchild PID"
 *   daemon SECONDS         fork a child that calls setsid() and sleeps; print "daemon PID"
 *   cat                    copy stdin to stdout until end of file
 *   pid                    print "pid PID PGID"
 *   stop                   send itself SIGSTOP
 *   stamp FILE             write CLOCK_MONOTONIC in nanoseconds to FILE (benchmarks)
 *   if-rank R              skip the next step unless this is rank R
 *   if-restart K           skip the next step unless TORCHELASTIC_RESTART_COUNT is K (a job
 *                          restarted in place, docs/resilience.md; unset counts as 0)
 * A skipped step that is itself an if-... skips the step it guards too: "if-restart 0 if-rank 2
 * exit 7" exits only in rank 2 of the first incarnation.
 * The rank is read from OMPI_COMM_WORLD_RANK (for flood lines and messages).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

/* The index of the last word of the step at argv[i] (its arguments; a condition's guarded step). */
static int step_end(int argc, char** argv, int i) {
  if (i >= argc) return argc - 1;
  const char* step = argv[i];
  if (strcmp(step, "if-rank") == 0 || strcmp(step, "if-restart") == 0) {
    return step_end(argc, argv, i + 2);
  }
  int args = strcmp(step, "flood") == 0 ? 2
             : (strcmp(step, "ignore-term") == 0 || strcmp(step, "env-all") == 0 ||
                strcmp(step, "cat") == 0 || strcmp(step, "pid") == 0 || strcmp(step, "stop") == 0)
                 ? 0
                 : 1;
  return i + args < argc ? i + args : argc - 1;
}

static void write_all(int fd, const char* buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      _exit(141); /* EPIPE and friends: like a shell pipeline would */
    }
    buf += n;
    len -= (size_t)n;
  }
}

static void say(int fd, const char* text) {
  write_all(fd, text, strlen(text));
  write_all(fd, "\n", 1);
}

static void sleep_seconds(double s) {
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void flood(const char* rank, long long bytes, long chunk) {
  char* buf = malloc((size_t)chunk + 128);
  if (buf == NULL) _exit(99);
  size_t used = 0;
  long long line = 0, written = 0;
  while (written < bytes) {
    char text[128];
    int n = snprintf(text, sizeof text, "r%s l%lld ", rank, line++);
    while (n < 99) text[n++] = 'x';
    text[99] = '\n';
    n = 100;
    if (written + n > bytes) n = (int)(bytes - written);
    memcpy(buf + used, text, (size_t)n);
    used += (size_t)n;
    written += n;
    while (used >= (size_t)chunk) {
      write_all(1, buf, (size_t)chunk);
      memmove(buf, buf + chunk, used - (size_t)chunk);
      used -= (size_t)chunk;
    }
  }
  if (used > 0) write_all(1, buf, used);
  free(buf);
}

int main(int argc, char** argv) {
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  if (rank == NULL) rank = getenv("PMI_RANK"); /* under mpiexec.hydra */
  if (rank == NULL) rank = "?";
  char line[512];
  for (int i = 1; i < argc; ++i) {
    const char* step = argv[i];
    const char* arg = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(step, "exit") == 0 && arg) {
      return atoi(argv[++i]);
    } else if (strcmp(step, "kill") == 0 && arg) {
      int sig = atoi(argv[++i]);
      signal(sig, SIG_DFL);
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, sig);
      sigprocmask(SIG_UNBLOCK, &set, NULL);
      raise(sig);
    } else if (strcmp(step, "sleep") == 0 && arg) {
      sleep_seconds(atof(argv[++i]));
    } else if (strcmp(step, "ignore-term") == 0) {
      signal(SIGTERM, SIG_IGN);
    } else if (strcmp(step, "echo") == 0 && arg) {
      say(1, argv[++i]);
    } else if (strcmp(step, "echo-err") == 0 && arg) {
      say(2, argv[++i]);
    } else if (strcmp(step, "partial") == 0 && arg) {
      ++i;
      write_all(1, argv[i], strlen(argv[i]));
    } else if (strcmp(step, "env") == 0 && arg) {
      const char* v = getenv(argv[++i]);
      if (v) snprintf(line, sizeof line, "%s=%s", argv[i], v);
      else snprintf(line, sizeof line, "%s unset", argv[i]);
      say(1, line);
    } else if (strcmp(step, "env-all") == 0) {
      for (char** e = environ; *e; ++e) say(1, *e);
    } else if (strcmp(step, "flood") == 0 && i + 2 < argc) {
      flood(rank, atoll(argv[i + 1]), atol(argv[i + 2]));
      i += 2;
    } else if ((strcmp(step, "grandchild") == 0 || strcmp(step, "daemon") == 0) && arg) {
      double s = atof(argv[++i]);
      int daemonize = step[0] == 'd';
      pid_t pid = fork();
      if (pid == 0) {
        if (daemonize) setsid();
        sleep_seconds(s);
        _exit(0);
      }
      snprintf(line, sizeof line, "%s %d", step, (int)pid);
      say(1, line);
    } else if (strcmp(step, "cat") == 0) {
      char buf[65536];
      ssize_t n;
      while ((n = read(0, buf, sizeof buf)) > 0) write_all(1, buf, (size_t)n);
    } else if (strcmp(step, "pid") == 0) {
      snprintf(line, sizeof line, "pid %d %d", (int)getpid(), (int)getpgrp());
      say(1, line);
    } else if (strcmp(step, "stamp") == 0 && arg) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      FILE* f = fopen(argv[++i], "w");
      if (f == NULL) return 98;
      fprintf(f, "%lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
      fclose(f);
    } else if ((strcmp(step, "if-rank") == 0 || strcmp(step, "if-restart") == 0) && arg) {
      const char* restart = getenv("TORCHELASTIC_RESTART_COUNT");
      const char* have = strcmp(step, "if-rank") == 0 ? rank : (restart ? restart : "0");
      if (strcmp(have, argv[++i]) != 0) i = step_end(argc, argv, i + 1); /* skip the next step */
    } else if (strcmp(step, "stop") == 0) {
      raise(SIGSTOP);
    } else {
      fprintf(stderr, "pm_payload: bad step '%s'\n", step);
      return 99;
    }
  }
  return 0;
}
