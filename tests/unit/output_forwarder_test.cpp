// output_forwarder with real pipes and real writer processes (forked children that write given
// bytes in given chunk sizes): no byte lost, no line cut, back-pressure, EPIPE, per-rank files.
// Then the same for pushed streams (bytes handed over by the agent link for remote ranks), alone
// and mixed with pipes.
#include "io/output_forwarder.hpp"

#include "io/output_format.hpp"
#include "pm/error.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using pm::output_stream;

// A forked writer: writes `data` to the pipe in chunks (cycled), then exits. Killed and reaped by
// the destructor if the test ends first.
struct writer {
  pid_t pid = -1;
  int read_fd = -1;
  writer(const std::string& data, std::vector<std::size_t> chunks) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::size_t pos = 0, i = 0;
      while (pos < data.size()) {
        const std::size_t n = std::min(chunks[i++ % chunks.size()], data.size() - pos);
        std::size_t done = 0;
        while (done < n) {
          const ssize_t r = ::write(p[1], data.data() + pos + done, n - done);
          if (r < 0) ::_exit(3);
          done += static_cast<std::size_t>(r);
        }
        pos += n;
      }
      ::_exit(0);
    }
    ::close(p[1]);
    read_fd = p[0];
  }
  bool running() { return pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
  int wait() {
    int status = 0;
    if (pid > 0 && ::waitpid(pid, &status, 0) == pid) pid = -1;
    return status;
  }
  ~writer() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

std::string lines_of(std::uint32_t rank, int count, std::size_t width = 40) {
  std::string s;
  for (int i = 0; i < count; ++i) {
    std::string line = "r" + std::to_string(rank) + " l" + std::to_string(i) + " ";
    line.resize(width, static_cast<char>('a' + rank % 26));
    s += line + "\n";
  }
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur)) out.push_back(cur);
  return out;
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/pm_output_test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

int open_file(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// Runs writers for each (rank, stream, data, chunks) through a forwarder into `opt`'s
// destinations; returns the byte counts reported at end-of-stream.
struct job {
  std::uint32_t rank;
  output_stream stream;
  std::string data;
  std::vector<std::size_t> chunks;
};

std::map<std::pair<std::uint32_t, int>, std::uint64_t> forward(
    const std::vector<job>& jobs, pm::output_options opt, std::size_t job_size,
    pm::io::forwarder_limits limits = {}) {
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, std::move(opt), job_size, limits);
  std::vector<std::unique_ptr<writer>> writers;
  std::map<std::pair<std::uint32_t, int>, std::uint64_t> counts;
  for (const auto& j : jobs) {
    writers.push_back(std::make_unique<writer>(j.data, j.chunks));
    fwd.attach(j.rank, j.stream, writers.back()->read_fd, [&counts, j](std::uint64_t n) {
      counts[{j.rank, static_cast<int>(j.stream)}] = n;
    });
  }
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(60));
  EXPECT_TRUE(drained);
  for (auto& w : writers) EXPECT_EQ(w->wait(), 0);
  return counts;
}

TEST(OutputForwarder, PlainManyRanksOddChunksNoLineCutNoByteLost) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  opt.stderr_fd = opt.stdout_fd;
  std::vector<job> jobs;
  const std::vector<std::vector<std::size_t>> chunkings = {
      {1}, {7, 13}, {4096}, {100000}, {3, 999}};
  for (std::uint32_t r = 0; r < 8; ++r) {
    jobs.push_back({r, output_stream::out, lines_of(r, 3000, 30 + r * 7), chunkings[r % 5]});
  }
  const auto counts = forward(jobs, opt, 8);
  ::close(opt.stdout_fd);
  const auto out = split_lines(slurp(path));
  std::map<std::uint32_t, std::string> per_rank;
  for (const auto& l : out) {
    ASSERT_FALSE(l.empty());
    const std::uint32_t r = static_cast<std::uint32_t>(std::stoul(l.substr(1)));
    per_rank[r] += l + "\n";
  }
  for (const auto& j : jobs) {
    EXPECT_EQ(per_rank[j.rank], j.data) << "rank " << j.rank;  // every line whole, in order
    EXPECT_EQ((counts.at({j.rank, 0})), j.data.size());
  }
}

TEST(OutputForwarder, PlainSingleRankIsByteExactWithAPartialLastLine) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  const std::string data = lines_of(0, 500) + "no newline at the end";
  forward({{0, output_stream::out, data, {333}}}, opt, 1);
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), data);
}

TEST(OutputForwarder, PlainAnotherRanksOutputStartsOnANewLineAfterAPartialOne) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2);
  writer a("a1\na2", {100});
  fwd.attach(0, output_stream::out, a.read_fd, nullptr);
  io.run_for(std::chrono::seconds(10));  // until rank 0's stream ended
  writer b("b1\n", {100});
  fwd.attach(1, output_stream::out, b.read_fd, nullptr);
  fwd.async_drain([] {});
  io.restart();
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), "a1\na2\nb1\n");
}

TEST(OutputForwarder, TaggedLinesNeverMixWhateverTheChunks) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.tag = true;
  opt.stdout_fd = open_file(path);
  opt.stderr_fd = opt.stdout_fd;
  std::vector<job> jobs;
  for (std::uint32_t r = 0; r < 6; ++r) {
    jobs.push_back(
        {r, r % 2 ? output_stream::err : output_stream::out, lines_of(r, 2000), {1 + r * 5, 4096}});
  }
  jobs.push_back({6, output_stream::out, "last line, no newline", {5}});
  forward(jobs, opt, 7);
  ::close(opt.stdout_fd);
  std::map<std::uint32_t, std::string> per_rank;
  for (const auto& l : split_lines(slurp(path))) {
    const auto close = l.find(">:");
    ASSERT_NE(close, std::string::npos) << l;
    const std::uint32_t r = static_cast<std::uint32_t>(std::stoul(l.substr(3)));
    const std::string tag =
        "[1," + std::to_string(r) + "]<" + (r % 2 && r < 6 ? "stderr" : "stdout") + ">:";
    ASSERT_EQ(l.substr(0, tag.size()), tag);
    per_rank[r] += l.substr(tag.size()) + "\n";
  }
  for (std::uint32_t r = 0; r < 6; ++r) EXPECT_EQ(per_rank[r], jobs[r].data);
  EXPECT_EQ(per_rank[6], "last line, no newline\n");  // tagged output is whole lines
}

TEST(OutputForwarder, LongLinesPassInMarkedPieces) {
  temp_dir dir;
  pm::output_options opt;
  opt.tag = true;
  opt.max_line = 1000;
  opt.stdout_fd = open_file(dir.file("tagged"));
  const std::string line = std::string(1000, 'a') + std::string(1000, 'b') + std::string(500, 'c');
  forward({{3, output_stream::out, line + "\nshort\n", {64}}}, opt, 4);
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(dir.file("tagged")), "[1,3]<stdout>+:" + std::string(1000, 'a') +
                                           "\n[1,3]<stdout>+:" + std::string(1000, 'b') +
                                           "\n[1,3]<stdout>:" + std::string(500, 'c') +
                                           "\n[1,3]<stdout>:short\n");
  // Plain mode passes the same bytes on unchanged.
  pm::output_options plain;
  plain.max_line = 1000;
  plain.stdout_fd = open_file(dir.file("plain"));
  forward({{3, output_stream::out, line + "\nshort\n", {64}}}, plain, 4);
  ::close(plain.stdout_fd);
  EXPECT_EQ(slurp(dir.file("plain")), line + "\nshort\n");
}

TEST(OutputForwarder, JsonLinesCarryRankStreamTimeLineAndFlags) {
  temp_dir dir;
  pm::output_options opt;
  opt.json_lines = true;
  opt.max_line = 8;
  opt.stdout_fd = open_file(dir.file("out"));
  opt.stderr_fd = open_file(dir.file("err"));
  forward({{1, output_stream::err, "0123456789\nend", {3}}}, opt, 2);
  ::close(opt.stdout_fd);
  ::close(opt.stderr_fd);
  EXPECT_EQ(slurp(dir.file("err")), "");  // JSON goes to stdout, both streams
  const auto lines = split_lines(slurp(dir.file("out")));
  ASSERT_EQ(lines.size(), 3u);
  const auto a = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(a["rank"], 1);
  EXPECT_EQ(a["stream"], "stderr");
  EXPECT_EQ(a["line"], "01234567");
  EXPECT_EQ(a["continued"], true);
  EXPECT_EQ(a["time"].get<std::string>().size(), 27u);
  const auto b = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(b["line"], "89");
  EXPECT_FALSE(b.contains("continued"));
  EXPECT_FALSE(b.contains("partial"));
  const auto c = nlohmann::json::parse(lines[2]);
  EXPECT_EQ(c["line"], "end");
  EXPECT_EQ(c["partial"], true);
}

TEST(OutputForwarder, ASinkReceivesWholeLines) {
  pm::output_options opt;
  std::vector<std::string> got;
  opt.sink = [&](std::uint32_t rank, output_stream s, std::string_view line, pm::line_flags f) {
    got.push_back(std::to_string(rank) + std::string(pm::to_string(s)) + ":" + std::string(line) +
                  (f.partial ? "(partial)" : ""));
  };
  forward({{2, output_stream::err, "he", {1}}, {0, output_stream::out, "x\ny\nz", {1}}}, opt, 3);
  std::vector<std::string> rank0, rank2;
  for (const auto& g : got) (g[0] == '0' ? rank0 : rank2).push_back(g);
  EXPECT_EQ(rank0, (std::vector<std::string>{"0stdout:x", "0stdout:y", "0stdout:z(partial)"}));
  EXPECT_EQ(rank2, (std::vector<std::string>{"2stderr:he(partial)"}));
}

TEST(OutputForwarder, PerRankFilesInOpenMpiLayoutAndCopiedToTheTerminal) {
  temp_dir dir;
  pm::output_options opt;
  opt.output_dir = dir.file("od");
  opt.stdout_fd = open_file(dir.file("term"));
  opt.stderr_fd = opt.stdout_fd;
  std::vector<job> jobs;
  for (std::uint32_t r = 0; r < 10; ++r) {
    jobs.push_back({r, output_stream::out, "out " + std::to_string(r) + "\n", {100}});
    jobs.push_back({r, output_stream::err, r == 4 ? "" : "err\n", {100}});
  }
  forward(jobs, opt, 10);
  ::close(opt.stdout_fd);
  for (std::uint32_t r = 0; r < 10; ++r) {
    const std::string d = dir.file("od/1/rank.0" + std::to_string(r));
    EXPECT_EQ(slurp(d + "/stdout"), "out " + std::to_string(r) + "\n");
    EXPECT_EQ(slurp(d + "/stderr"), r == 4 ? "" : "err\n");
    EXPECT_TRUE(fs::exists(d + "/stderr"));  // created even when empty, as mpirun does
  }
  EXPECT_EQ(split_lines(slurp(dir.file("term"))).size(), 19u);
}

TEST(OutputForwarder, PerRankFilesMergedAndNocopy) {
  temp_dir dir;
  pm::output_options opt;
  opt.output_dir = dir.file("od");
  opt.output_dir_nocopy = true;
  opt.merge_stderr = true;
  opt.tag = true;
  opt.stdout_fd = open_file(dir.file("term"));
  forward({{0, output_stream::out, "hi\n", {100}}, {1, output_stream::out, "ho\n", {100}}}, opt, 2);
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(dir.file("term")), "");
  EXPECT_EQ(slurp(dir.file("od/1/rank.1/stdout")), "[1,1]<stdout>:ho\n");  // tagged, like mpirun
  EXPECT_FALSE(fs::exists(dir.file("od/1/rank.1/stderr")));
}

TEST(OutputForwarder, AnOutputDirThatCannotBeCreatedIsAnError) {
  boost::asio::io_context io;
  pm::output_options opt;
  opt.output_dir = "/proc/no/such";
  try {
    pm::io::output_forwarder fwd(io, opt, 1);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::system);
    EXPECT_EQ(std::string(e.what()).rfind("--output-filename: cannot create '/proc/no/such': ", 0),
              0u)
        << e.what();
  }
}

// What the per-rank files would be written through is refused before any stream is attached (so
// before any rank starts), and nothing is written through it (docs/output.md, "Where the files
// may be"; the walk itself: safe_path_test.cpp).
TEST(OutputForwarder, AFileOrDirectoryThatIsNotSafeIsRefusedAtTheStart) {
  temp_dir dir;
  std::ofstream(dir.file("victim")) << "precious\n";
  fs::create_directories(dir.file("od/1/rank.1"));
  ASSERT_EQ(::symlink(dir.file("victim").c_str(), dir.file("od/1/rank.1/stderr").c_str()), 0);
  boost::asio::io_context io;
  pm::output_options opt;
  opt.output_dir = dir.file("od");
  try {
    pm::io::output_forwarder fwd(io, opt, 2);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::system);
    EXPECT_EQ(std::string(e.what()), "--output-filename: refusing '" +
                                         dir.file("od/1/rank.1/stderr") +
                                         "': it is a symbolic link");
  }
  // With merged streams no stderr file is written: that link is never reached.
  opt.merge_stderr = true;
  EXPECT_NO_THROW(pm::io::output_forwarder(io, opt, 2));
  // A group- or world-writable level is refused as well (here the job's own DIR/1).
  opt.merge_stderr = false;
  fs::remove(dir.file("od/1/rank.1/stderr"));
  ::chmod(dir.file("od/1").c_str(), 0777);
  try {
    pm::io::output_forwarder fwd(io, opt, 2);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(std::string(e.what()), "--output-filename: refusing '" + dir.file("od/1") +
                                         "': it is writable by every user (mode 0777)");
  }
  EXPECT_EQ(slurp(dir.file("victim")), "precious\n");
}

// A spawned job's files are made when its ranks start: a refusal then is reported through
// on_error, the file is skipped (never written through) and the output still reaches the terminal.
TEST(OutputForwarder, AnUnsafeFileOfASpawnedJobIsReportedAndSkipped) {
  temp_dir dir;
  std::ofstream(dir.file("victim")) << "precious\n";
  fs::create_directories(dir.file("od/2/rank.0"));
  ASSERT_EQ(::symlink(dir.file("victim").c_str(), dir.file("od/2/rank.0/stdout").c_str()), 0);
  pm::output_options opt;
  opt.output_dir = dir.file("od");
  opt.stdout_fd = open_file(dir.file("term"));
  opt.stderr_fd = opt.stdout_fd;
  std::vector<std::string> errors;
  opt.on_error = [&](std::string_view m) { errors.emplace_back(m); };
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  fwd.add_job(1, 1);
  fwd.open_stream(1, output_stream::out, [](std::uint64_t) {});
  const std::string text = "from the spawned job\n";
  fwd.push(1, output_stream::out, text);
  fwd.close_stream(1, output_stream::out);
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_TRUE(drained);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "--output-filename: refusing '" + dir.file("od/2/rank.0/stdout") +
                           "': it is a symbolic link; rank 1's stdout is not written to a file");
  EXPECT_EQ(slurp(dir.file("victim")), "precious\n");
  EXPECT_EQ(slurp(dir.file("term")), text);
}

TEST(OutputForwarder, ABlockedDestinationBlocksTheWritersWithBoundedMemory) {
  int dest[2];
  ASSERT_EQ(::pipe2(dest, O_CLOEXEC), 0);
  const std::string data = lines_of(0, 200000);  // 8 MB
  std::string got;
  std::thread reader;
  {
    pm::output_options opt;
    opt.stdout_fd = dest[1];
    pm::io::forwarder_limits limits;
    limits.queue_limit = 256 * 1024;
    limits.read_chunk = 64 * 1024;
    limits.pipe_size = 64 * 1024;
    boost::asio::io_context io;
    pm::io::output_forwarder fwd(io, opt, 1, limits);
    writer w(data, {4096});
    std::uint64_t count = 0;
    fwd.attach(0, output_stream::out, w.read_fd, [&](std::uint64_t n) { count = n; });
    io.run_for(std::chrono::milliseconds(500));
    // Nobody reads `dest`: the writer is stuck, the forwarder holds a bounded amount.
    EXPECT_TRUE(w.running());
    EXPECT_LE(fwd.stats().max_queued, limits.queue_limit + 2 * limits.read_chunk);
    EXPECT_LT(fwd.stats().bytes_read, 2u << 20);
    // The inherited descriptor was not made non-blocking (the forwarder reopened it).
    EXPECT_EQ(::fcntl(dest[1], F_GETFL) & O_NONBLOCK, 0);
    reader = std::thread([&got, fd = dest[0]] {
      char buf[65536];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
    });
    bool drained = false;
    fwd.async_drain([&] { drained = true; });
    io.restart();
    io.run_for(std::chrono::seconds(60));
    EXPECT_TRUE(drained);
    EXPECT_EQ(w.wait(), 0);
    EXPECT_EQ(count, data.size());
  }  // the forwarder closes its own write end
  ::close(dest[1]);
  reader.join();
  ::close(dest[0]);
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
}

TEST(OutputForwarder, AClosedDestinationIsReportedAndItsWritersGetABrokenPipe) {
  int dest[2];
  ASSERT_EQ(::pipe2(dest, O_CLOEXEC), 0);
  ::close(dest[0]);  // like `pmrun ... | head -1` after head exited
  std::vector<std::string> errors;
  pm::output_options opt;
  opt.stdout_fd = dest[1];
  opt.stderr_fd = dest[1];
  opt.on_error = [&](std::string_view m) { errors.emplace_back(m); };
  const std::string data = lines_of(0, 100000);  // 4 MB, far more than any pipe holds
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  writer w(data, {4096});
  bool closed = false, drained = false;
  fwd.attach(0, output_stream::out, w.read_fd, [&](std::uint64_t) { closed = true; });
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(60));
  EXPECT_TRUE(closed);
  EXPECT_TRUE(drained);  // nothing blocks: the forwarder closed the rank's pipe
  // As in a shell pipeline, the writer now fails to write (SIGPIPE, or EPIPE: exit 3).
  EXPECT_NE(w.wait(), 0);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            "cannot write to standard output: Broken pipe; the ranks' further output to it is "
            "discarded");
  ::close(dest[1]);
}

TEST(OutputForwarder, AKilledWriterIsDrainedToTheEnd) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const std::string data = lines_of(0, 1000) + "cut off mid-li";
  ASSERT_EQ(::write(p[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::close(p[1]);  // the writer is gone (as after SIGKILL); its bytes are still in the pipe
  std::uint64_t count = 0;
  fwd.attach(0, output_stream::out, p[0], [&](std::uint64_t n) { count = n; });
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_TRUE(drained);
  EXPECT_EQ(count, data.size());
  EXPECT_EQ(slurp(path), data);
}

// ---- pushed streams -----------------------------------------------------------------------------

using stream_key = std::pair<std::uint32_t, int>;

// Lines "r<R> s<S> l<N> " padded with a letter: a line's rank and stream can be read from its text
// alone (plain and timestamp-only output carry no tag), so the checks below see every cut or mix.
std::string stream_lines(std::uint32_t rank, output_stream s, int count, std::size_t width,
                         bool partial_end) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    std::string line = "r" + std::to_string(rank) + " s" + std::to_string(static_cast<int>(s)) +
                       " l" + std::to_string(i) + " ";
    line.resize(std::max(width, line.size()), static_cast<char>('a' + (rank * 2 + 1) % 26));
    out += line + "\n";
  }
  if (partial_end)
    out += "r" + std::to_string(rank) + " s" + std::to_string(static_cast<int>(s)) +
           " partial, no newline";
  return out;
}

// Chunk sizes covering `total` bytes that mostly do not end at line ends: 1-byte and 4096-byte
// chunks among random ones.
std::vector<std::size_t> random_chunks(std::mt19937& rng, std::size_t total) {
  std::vector<std::size_t> chunks;
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<std::size_t> any(2, 9000);
  for (std::size_t done = 0; done < total;) {
    const int k = kind(rng);
    const std::size_t n = std::min(total - done, k < 2 ? 1 : k < 4 ? 4096 : any(rng));
    chunks.push_back(n);
    done += n;
  }
  return chunks;
}

// A rank's stream that is either read from a pipe (a writer process, chunks cycled) or pushed
// (each chunk pushed from a buffer that is overwritten right after push returns, so a forwarder
// that kept the caller's span would show garbage).
struct source {
  std::uint32_t rank;
  output_stream stream;
  std::string data;
  bool pushed;
  std::vector<std::size_t> chunks;
};

struct forwarded {
  std::map<stream_key, std::uint64_t> counts;  // on_eof's byte counts
  pm::io::output_forwarder::statistics stats;
};

// Runs every source through one forwarder on one io_context until async_drain: pipes are read as
// the writers write, pushed streams are fed one chunk per handler, interleaved with each other and
// with the pipes.
forwarded forward_sources(const std::vector<source>& sources, pm::output_options opt,
                          std::size_t job_size, pm::io::forwarder_limits limits = {}) {
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, std::move(opt), job_size, limits);
  std::vector<std::unique_ptr<writer>> writers;
  forwarded result;
  std::vector<char> buffer;
  struct feed_state {
    std::size_t pos = 0, chunk = 0;
  };
  std::vector<feed_state> feeds(sources.size());
  std::function<void(std::size_t)> feed = [&](std::size_t i) {
    const source& src = sources[i];
    feed_state& f = feeds[i];
    if (f.pos < src.data.size()) {
      const std::size_t n =
          std::min(src.chunks[f.chunk++ % src.chunks.size()], src.data.size() - f.pos);
      buffer.assign(src.data.begin() + static_cast<std::ptrdiff_t>(f.pos),
                    src.data.begin() + static_cast<std::ptrdiff_t>(f.pos + n));
      fwd.push(src.rank, src.stream, buffer);
      std::fill(buffer.begin(), buffer.end(), '#');
      f.pos += n;
      boost::asio::post(io, [&feed, i] { feed(i); });
    } else {
      fwd.close_stream(src.rank, src.stream);
    }
  };
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const source& src = sources[i];
    auto on_eof = [&result, key = stream_key{src.rank, static_cast<int>(src.stream)}](
                      std::uint64_t n) { result.counts[key] = n; };
    if (src.pushed) {
      fwd.open_stream(src.rank, src.stream, on_eof);
      boost::asio::post(io, [&feed, i] { feed(i); });
    } else {
      writers.push_back(std::make_unique<writer>(src.data, src.chunks));
      fwd.attach(src.rank, src.stream, writers.back()->read_fd, on_eof);
    }
  }
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(120));
  EXPECT_TRUE(drained);
  for (auto& w : writers) EXPECT_EQ(w->wait(), 0);
  result.stats = fwd.stats();
  return result;
}

struct output_mode {
  std::string name;
  bool tag = false, timestamp = false, json = false, merge = false, files = false, sink = false;
};

// Splits text output (any mode but JSON) into each (rank, stream)'s lines, every line ended with
// '\n'; fails the test on a line that is cut, mixed or wrongly prefixed (the (rank, stream) a
// line's text names must be the one its tag names).
void collect_text(const std::string& text, const output_mode& m,
                  std::map<stream_key, std::string>& got) {
  for (const auto& l : split_lines(text)) {
    std::string rest = l;
    if (m.timestamp) {
      ASSERT_GE(rest.size(), 24u) << l;
      ASSERT_EQ(rest[3], ' ') << l;  // "Sun Nov 22 16:37:12 2026"
      ASSERT_EQ(rest[13], ':') << l;
      rest = rest.substr(24);
    }
    // The line's own text starts after the tag's ">:" (lines never contain ">:").
    const std::size_t start = m.tag || m.timestamp ? rest.find(">:") + 2 : 0;
    unsigned rank = 0, stream = 0;
    if (start == 1 || std::sscanf(rest.c_str() + start, "r%u s%u ", &rank, &stream) != 2) {
      ADD_FAILURE() << "not a whole line: " << l;
      return;
    }
    const std::string stream_name = stream == 0 ? "stdout" : "stderr";
    std::string prefix;
    if (m.tag) prefix += "[1," + std::to_string(rank) + "]";
    if (m.tag || m.timestamp) prefix += "<" + stream_name + ">:";
    ASSERT_EQ(rest.substr(0, prefix.size()), prefix) << l;
    got[{rank, static_cast<int>(stream)}] += rest.substr(prefix.size()) + "\n";
  }
}

void collect_json(const std::string& text, std::map<stream_key, std::string>& got) {
  for (const auto& l : split_lines(text)) {
    const auto j = nlohmann::json::parse(l);
    const std::string line = j["line"];
    unsigned rank = 0, stream = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "r%u s%u ", &rank, &stream), 2) << l;
    ASSERT_EQ(j["rank"], rank) << l;
    ASSERT_EQ(j["stream"], stream == 0 ? "stdout" : "stderr") << l;
    ASSERT_FALSE(j.contains("continued")) << l;
    got[{rank, static_cast<int>(stream)}] += line + (j.contains("partial") ? "" : "\n");
  }
}

std::string with_final_newline(std::string s) {
  if (!s.empty() && s.back() != '\n') s += '\n';
  return s;
}

TEST(OutputForwarder, PushedStreamsInRandomChunksArriveWholeInOrderAndCompleteInEveryMode) {
  const std::vector<output_mode> modes = {
      {"plain"},
      {"tagged", true},
      {"timestamped", false, true},
      {"tagged+timestamped", true, true},
      {"json", false, false, true},
      {"merged stderr, tagged", true, false, false, true},
      {"per-rank files", false, false, false, false, true},
      {"per-rank files, tagged", true, false, false, false, true},
      {"sink", false, false, false, false, false, true},
  };
  constexpr std::uint32_t ranks = 6;
  std::mt19937 rng(20261122);
  for (const auto& m : modes) {
    SCOPED_TRACE(m.name);
    temp_dir dir;
    pm::output_options opt;
    opt.tag = m.tag;
    opt.timestamp = m.timestamp;
    opt.json_lines = m.json;
    opt.merge_stderr = m.merge;
    if (m.files) opt.output_dir = dir.file("od");
    opt.stdout_fd = open_file(dir.file("out"));
    opt.stderr_fd = open_file(dir.file("err"));
    std::map<stream_key, std::string> sunk;
    if (m.sink) {
      opt.sink = [&](std::uint32_t rank, output_stream s, std::string_view line, pm::line_flags f) {
        EXPECT_FALSE(f.continued);
        sunk[{rank, static_cast<int>(s)}] += std::string(line) + (f.partial ? "" : "\n");
      };
    }
    std::vector<source> sources;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      for (const output_stream s : {output_stream::out, output_stream::err}) {
        if (m.merge && s == output_stream::err) continue;
        std::string data =
            stream_lines(r, s, 150 + 40 * static_cast<int>(r), 20 + r * 13, r % 2 == 1);
        // Rank 0's stdout goes byte by byte, rank 1's stdout in 4096-byte chunks.
        auto chunks = r == 0 && s == output_stream::out   ? std::vector<std::size_t>{1}
                      : r == 1 && s == output_stream::out ? std::vector<std::size_t>{4096}
                                                          : random_chunks(rng, data.size());
        sources.push_back({r, s, std::move(data), true, std::move(chunks)});
      }
    }
    const auto result = forward_sources(sources, opt, ranks);
    ::close(opt.stdout_fd);
    ::close(opt.stderr_fd);

    std::map<stream_key, std::string> got;
    if (m.json) {
      EXPECT_EQ(slurp(dir.file("err")), "");
      collect_json(slurp(dir.file("out")), got);
    } else if (m.sink) {
      got = sunk;
      EXPECT_EQ(slurp(dir.file("out")), "");
    } else {
      collect_text(slurp(dir.file("out")), m, got);
      collect_text(slurp(dir.file("err")), m, got);
    }
    std::uint64_t total = 0;
    for (const auto& src : sources) {
      const stream_key key{src.rank, static_cast<int>(src.stream)};
      SCOPED_TRACE("rank " + std::to_string(src.rank) + " stream " + std::to_string(key.second));
      // JSON and sinks mark a partial last line; text output ends every line.
      EXPECT_TRUE(got[key] == (m.json || m.sink ? src.data : with_final_newline(src.data)));
      EXPECT_EQ(result.counts.at(key), src.data.size());
      total += src.data.size();
      if (m.files) {
        const std::string file = pm::io::rank_directory(dir.file("od"), src.rank, ranks) + "/" +
                                 std::string(pm::to_string(src.stream));
        if (m.tag) {
          std::map<stream_key, std::string> in_file;
          collect_text(slurp(file), m, in_file);
          EXPECT_TRUE(in_file[key] == with_final_newline(src.data));
        } else {
          EXPECT_TRUE(slurp(file) == src.data);  // byte for byte, partial last line kept as is
        }
      }
    }
    EXPECT_EQ(result.stats.bytes_read, total);
    EXPECT_EQ(result.stats.bytes_discarded, 0u);
    EXPECT_EQ(result.stats.streams_open, 0u);
  }
}

TEST(OutputForwarder, APushedStreamAloneIsByteExactWithItsPartialLastLine) {
  temp_dir dir;
  pm::output_options opt;
  opt.stdout_fd = open_file(dir.file("out"));
  const std::string data = stream_lines(0, output_stream::out, 500, 37, true);
  forward_sources({{0, output_stream::out, data, true, {7, 4096, 1, 333}}}, opt, 1);
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(dir.file("out")), data);
}

TEST(OutputForwarder, PipesAndPushedStreamsMixInOneJobWithoutCuttingLines) {
  std::mt19937 rng(7);
  for (const bool tag : {false, true}) {
    SCOPED_TRACE(tag ? "tagged" : "plain");
    temp_dir dir;
    pm::output_options opt;
    opt.tag = tag;
    opt.stdout_fd = open_file(dir.file("out"));
    opt.stderr_fd = opt.stdout_fd;  // one destination, one queue for all
    std::vector<source> sources;
    for (std::uint32_t r = 0; r < 8; ++r) {
      for (const output_stream s : {output_stream::out, output_stream::err}) {
        std::string data = stream_lines(r, s, 1500, 30 + r * 9, r == 3);
        const bool pushed = r % 2 == 1;  // odd ranks "on another host"
        auto chunks =
            pushed ? random_chunks(rng, data.size())
                   : std::vector<std::size_t>{r == 0 ? std::size_t{1} : std::size_t{4096}, 77};
        sources.push_back({r, s, std::move(data), pushed, std::move(chunks)});
      }
    }
    const auto result = forward_sources(sources, opt, 8);
    ::close(opt.stdout_fd);
    std::map<stream_key, std::string> got;
    output_mode m;
    m.tag = tag;
    collect_text(slurp(dir.file("out")), m, got);
    for (const auto& src : sources) {
      const stream_key key{src.rank, static_cast<int>(src.stream)};
      EXPECT_TRUE(got[key] == with_final_newline(src.data)) << src.rank << "/" << key.second;
      EXPECT_EQ(result.counts.at(key), src.data.size());
    }
  }
}

TEST(OutputForwarder, ACongestedDestinationPausesTheProducerAndResumesItOnceDrained) {
  int dest[2];
  ASSERT_EQ(::pipe2(dest, O_CLOEXEC), 0);
  const std::string data = stream_lines(0, output_stream::out, 200000, 40, true);  // 8 MB
  constexpr std::size_t frame = 4096 + 17;  // frames do not end at line ends
  std::string got;
  std::thread reader;
  {
    pm::output_options opt;
    opt.stdout_fd = dest[1];
    pm::io::forwarder_limits limits;
    limits.queue_limit = 256 * 1024;
    boost::asio::io_context io;
    pm::io::output_forwarder fwd(io, opt, 1, limits);
    std::uint64_t count = 0;
    bool closed = false;
    fwd.open_stream(0, output_stream::out, [&](std::uint64_t n) { count = n; });
    std::size_t pos = 0;
    auto push_frame = [&] {
      const std::size_t n = std::min(frame, data.size() - pos);
      fwd.push(0, output_stream::out, std::span<const char>(data.data() + pos, n));
      pos += n;
    };
    // What a link does: send while there is credit (not congested), stop otherwise.
    auto pump = [&] {
      while (pos < data.size() && !fwd.congested(0, output_stream::out)) push_frame();
      if (pos == data.size() && !closed) {
        fwd.close_stream(0, output_stream::out);
        closed = true;
      }
    };
    int resumes = 0;
    fwd.set_resume_callback([&] { ++resumes; });
    pump();
    // Nobody reads `dest`: the queue filled up and the producer was told to stop.
    EXPECT_TRUE(fwd.congested(0, output_stream::out));
    EXPECT_LT(pos, data.size());
    EXPECT_LE(fwd.stats().max_queued, limits.queue_limit + frame);
    io.run_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(fwd.congested(0, output_stream::out));
    EXPECT_EQ(resumes, 0);
    // A push while congested never blocks and never drops: it is queued beyond the limit.
    for (int i = 0; i < 10; ++i) push_frame();
    EXPECT_GE(fwd.stats().max_queued, limits.queue_limit + 9 * frame);
    EXPECT_FALSE(fwd.discarding(0, output_stream::out));

    reader = std::thread([&got, fd = dest[0]] {
      char buf[65536];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
    });
    fwd.set_resume_callback([&] {
      ++resumes;
      pump();
    });
    bool drained = false;
    fwd.async_drain([&] { drained = true; });
    io.restart();
    io.run_for(std::chrono::seconds(60));
    EXPECT_TRUE(drained);
    EXPECT_TRUE(closed);
    EXPECT_GE(resumes, 1);
    EXPECT_EQ(count, data.size());
    EXPECT_EQ(fwd.stats().bytes_read, data.size());
    EXPECT_EQ(fwd.stats().bytes_written, data.size());
    EXPECT_FALSE(fwd.congested(0, output_stream::out));
  }  // the forwarder closes its own write end
  ::close(dest[1]);
  reader.join();
  ::close(dest[0]);
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
}

TEST(OutputForwarder, AClosedDestinationOfPushedStreamsIsReportedOnceAndDiscards) {
  int dest[2];
  ASSERT_EQ(::pipe2(dest, O_CLOEXEC), 0);
  ::close(dest[0]);  // like `pmrun ... | head -1` after head exited
  std::vector<std::string> errors;
  pm::output_options opt;
  opt.stdout_fd = dest[1];
  opt.stderr_fd = dest[1];
  opt.on_error = [&](std::string_view m) { errors.emplace_back(m); };
  pm::io::forwarder_limits limits;
  limits.queue_limit = 64 * 1024;
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2, limits);
  const std::string data = stream_lines(0, output_stream::out, 100000, 40, false);  // 4 MB
  std::map<stream_key, std::uint64_t> counts;
  for (std::uint32_t r = 0; r < 2; ++r) {
    fwd.open_stream(r, output_stream::out, [&counts, r](std::uint64_t n) { counts[{r, 0}] = n; });
  }
  // Everything is pushed at once without running the io_context: nothing waits for a reader.
  for (std::size_t pos = 0; pos < data.size(); pos += 4096) {
    for (std::uint32_t r = 0; r < 2; ++r) {
      fwd.push(
          r, output_stream::out,
          std::span<const char>(data.data() + pos, std::min<std::size_t>(4096, data.size() - pos)));
    }
  }
  EXPECT_TRUE(fwd.discarding(0, output_stream::out));  // the link may close the rank's pipe
  EXPECT_FALSE(fwd.congested(0, output_stream::out));
  for (std::uint32_t r = 0; r < 2; ++r) fwd.close_stream(r, output_stream::out);
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(10));
  EXPECT_TRUE(drained);
  EXPECT_EQ(counts[(stream_key{0, 0})], data.size());
  EXPECT_EQ(counts[(stream_key{1, 0})], data.size());
  EXPECT_EQ(fwd.stats().bytes_read, 2 * data.size());
  EXPECT_EQ(fwd.stats().bytes_written + fwd.stats().bytes_discarded, 2 * data.size());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            "cannot write to standard output: Broken pipe; the ranks' further output to it is "
            "discarded");
  ::close(dest[1]);
}

TEST(OutputForwarder, APushedStreamWithAPerRankFileKeepsItAfterTheTerminalFailed) {
  temp_dir dir;
  int dest[2];
  ASSERT_EQ(::pipe2(dest, O_CLOEXEC), 0);
  ::close(dest[0]);
  int errors = 0;
  pm::output_options opt;
  opt.stdout_fd = dest[1];
  opt.output_dir = dir.file("od");
  opt.on_error = [&](std::string_view) { ++errors; };
  const std::string data = stream_lines(0, output_stream::out, 100000, 40, true);
  {
    boost::asio::io_context io;
    pm::io::output_forwarder fwd(io, opt, 1);
    fwd.open_stream(0, output_stream::out, nullptr);
    for (std::size_t pos = 0; pos < data.size(); pos += 1000) {
      fwd.push(
          0, output_stream::out,
          std::span<const char>(data.data() + pos, std::min<std::size_t>(1000, data.size() - pos)));
    }
    EXPECT_FALSE(fwd.discarding(0, output_stream::out));  // the file still takes it
    fwd.close_stream(0, output_stream::out);
    bool drained = false;
    fwd.async_drain([&] { drained = true; });
    io.run_for(std::chrono::seconds(10));
    EXPECT_TRUE(drained);
  }
  ::close(dest[1]);
  EXPECT_EQ(errors, 1);
  EXPECT_TRUE(slurp(dir.file("od/1/rank.0/stdout")) == data);
}

TEST(OutputForwarder, OnEofOfAPushedStreamIsPostedAndMisuseIsAnInternalError) {
  boost::asio::io_context io;
  pm::output_options opt;
  std::vector<std::string> lines;
  opt.sink = [&](std::uint32_t, output_stream, std::string_view line, pm::line_flags) {
    lines.emplace_back(line);
  };
  pm::io::output_forwarder fwd(io, opt, 2);
  auto expect_internal = [](auto&& call, const std::string& message) {
    try {
      call();
      ADD_FAILURE() << "no error: " << message;
    } catch (const pm::error& e) {
      EXPECT_EQ(e.code(), pm::errc::internal);
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  const std::string hello = "hello\nwor";
  expect_internal([&] { fwd.push(0, output_stream::out, hello); },
                  "output forwarder: push to rank 0's stdout, which was never opened");
  expect_internal([&] { (void)fwd.congested(0, output_stream::out); },
                  "output forwarder: rank 0's stdout was never opened");
  std::uint64_t eof_bytes = 0;
  bool eof = false;
  fwd.open_stream(0, output_stream::out, [&](std::uint64_t n) {
    eof = true;
    eof_bytes = n;
  });
  expect_internal([&] { fwd.open_stream(0, output_stream::out, nullptr); },
                  "output forwarder: rank 0's stdout opened twice");
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ::close(p[1]);
  fwd.attach(1, output_stream::err, p[0], nullptr);
  expect_internal([&] { fwd.push(1, output_stream::err, hello); },
                  "output forwarder: push to rank 1's stderr, which is read from a pipe");
  int q[2];
  ASSERT_EQ(::pipe2(q, O_CLOEXEC), 0);
  expect_internal([&] { fwd.attach(0, output_stream::out, q[0], nullptr); },
                  "output forwarder: rank 0's stdout opened twice");
  EXPECT_EQ(::fcntl(q[0], F_GETFD), -1);  // attach owned it and closed it
  ::close(q[1]);

  fwd.push(0, output_stream::out, hello);
  fwd.push(0, output_stream::out, std::string_view("ld"));
  EXPECT_EQ(lines, std::vector<std::string>{"hello"});
  fwd.close_stream(0, output_stream::out);
  EXPECT_EQ(lines, (std::vector<std::string>{"hello", "world"}));  // the partial line, at once
  EXPECT_FALSE(eof);  // posted, not called inside close_stream
  expect_internal([&] { fwd.push(0, output_stream::out, hello); },
                  "output forwarder: push to rank 0's stdout, which is closed");
  expect_internal([&] { fwd.close_stream(0, output_stream::out); },
                  "output forwarder: close of rank 0's stdout, which is closed");
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(10));
  EXPECT_TRUE(eof);
  EXPECT_EQ(eof_bytes, hello.size() + 2);
  EXPECT_TRUE(drained);
}

}  // namespace

// ---- prompts: a partial line shown after a quiet time ------------------------------------------

namespace {

// A pipe whose write end the test holds, so that it decides when bytes come and when they end.
struct held_pipe {
  int read_fd = -1, write_fd = -1;
  held_pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      read_fd = p[0];
      write_fd = p[1];
    }
  }
  void put(const std::string& s) {
    EXPECT_EQ(::write(write_fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void close() {
    if (write_fd >= 0) ::close(write_fd);
    write_fd = -1;
  }
  ~held_pipe() { close(); }
};

}  // namespace

TEST(OutputForwarder, APromptIsShownAfterAQuietTimeAndItsLineIsNeverCut) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  opt.output_dir = dir.file("files");
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2);
  held_pipe prompt, other;
  fwd.attach(0, output_stream::out, prompt.read_fd, nullptr);
  fwd.attach(1, output_stream::out, other.read_fd, nullptr);
  prompt.put("Name: ");
  io.run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(slurp(path), "Name: ");  // shown, though no newline came (printf "Name: "; read x)
  other.put("rank 1 says hi\n");     // held: it would cut the prompt's line
  io.run_for(std::chrono::milliseconds(100));
  EXPECT_EQ(slurp(path), "Name: ");
  prompt.put("Bob\n");
  prompt.close();
  other.close();
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(10));
  EXPECT_TRUE(drained);
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), "Name: Bob\nrank 1 says hi\n");
  // Per-rank files get whole lines, as always.
  EXPECT_EQ(slurp(pm::io::rank_directory(opt.output_dir, 0, 2) + "/stdout"), "Name: Bob\n");
}

TEST(OutputForwarder, APartialLineWaitsWhileOtherRanksWriteOn) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2);
  held_pipe slow, busy;
  fwd.attach(0, output_stream::out, slow.read_fd, nullptr);
  fwd.attach(1, output_stream::out, busy.read_fd, nullptr);
  slow.put("the middle of a line ");  // descheduled here, the others keep writing
  std::string expected_busy;
  for (int i = 0; i < 10; ++i) {
    const std::string line = "busy " + std::to_string(i) + "\n";
    busy.put(line);
    expected_busy += line;
    io.run_for(std::chrono::milliseconds(30));  // shorter than the quiet time
  }
  EXPECT_EQ(slurp(path), expected_busy);  // the partial line was not shown
  slow.put("ends here\n");
  slow.close();
  busy.close();
  fwd.async_drain([] {});
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), expected_busy + "the middle of a line ends here\n");
}

TEST(OutputForwarder, ALineWrittenInQuickPiecesIsNotShownBeforeItsEnd) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  opt.partial_line_delay = std::chrono::milliseconds(200);
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  held_pipe p;
  fwd.attach(0, output_stream::out, p.read_fd, nullptr);
  for (int i = 0; i < 5; ++i) {
    p.put("piece" + std::to_string(i) + " ");
    io.run_for(std::chrono::milliseconds(60));  // pauses shorter than the quiet time
    EXPECT_EQ(slurp(path), "") << i;
  }
  p.put("end\n");
  p.close();
  fwd.async_drain([] {});
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), "piece0 piece1 piece2 piece3 piece4 end\n");
}

TEST(OutputForwarder, TaggedOutputKeepsAPartialLineUntilItEnds) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  opt.tag = true;
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  held_pipe p;
  fwd.attach(0, output_stream::out, p.read_fd, nullptr);
  p.put("Name: ");
  io.run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(slurp(path), "");  // a tag per piece would cut the line
  p.put("Bob\n");
  p.close();
  fwd.async_drain([] {});
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), "[1,0]<stdout>:Name: Bob\n");
}

TEST(OutputForwarder, AStalledDestinationNeverShowsAPartialLineThatGoesOn) {
  // Every rank stops when the terminal stops reading: that quiet is the destination's, not a
  // prompt's. A line cut at a read boundary must not be shown early, or the lines that pile up
  // behind it would cut it (issue 11's tree tests saw 2 extra newlines after a 5 s stall).
  int dest[2];
  ASSERT_EQ(::pipe2(dest, O_CLOEXEC), 0);
  pm::output_options opt;
  opt.stdout_fd = dest[1];
  pm::io::forwarder_limits limits;
  limits.queue_limit = 64 << 10;
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2, limits);
  // Ranks on other hosts: their bytes come pushed, in pieces cut anywhere.
  fwd.open_stream(0, output_stream::out, nullptr);
  fwd.open_stream(1, output_stream::out, nullptr);
  std::string lines;
  for (int i = 0; lines.size() < (256u << 10); ++i)
    lines += "rank 1 line " + std::to_string(i) + "\n";
  fwd.push(1, output_stream::out, lines);  // more than the unread pipe and the queue take
  fwd.push(0, output_stream::out, std::string_view("the middle of a line "));
  io.run_for(std::chrono::milliseconds(300));  // the terminal reads nothing meanwhile
  fwd.push(1, output_stream::out, lines);
  fwd.push(0, output_stream::out, std::string_view("ends here\n"));
  fwd.close_stream(0, output_stream::out);
  fwd.close_stream(1, output_stream::out);
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  ::fcntl(dest[0], F_SETFL, O_NONBLOCK);
  std::string got;
  char buf[65536];
  for (int i = 0; i < 1000 && !drained; ++i) {
    io.run_for(std::chrono::milliseconds(5));
    for (ssize_t n; (n = ::read(dest[0], buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<std::size_t>(n));
  }
  EXPECT_TRUE(drained);
  for (ssize_t n; (n = ::read(dest[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(dest[0]);
  ::close(dest[1]);
  EXPECT_EQ(got.size(), 2 * lines.size() + std::string("the middle of a line ends here\n").size());
  EXPECT_NE(got.find("\nthe middle of a line ends here\n"), std::string::npos)
      << got.substr(got.find("the middle") - 40, 120);
  std::istringstream in(got);
  std::size_t count = 0;
  for (std::string line; std::getline(in, line); ++count) {
    EXPECT_TRUE(line.starts_with("rank 1 line ") || line == "the middle of a line ends here")
        << "cut: '" << line << "'";
  }
  EXPECT_EQ(count, 2 * static_cast<std::size_t>(std::count(lines.begin(), lines.end(), '\n')) + 1);
}
