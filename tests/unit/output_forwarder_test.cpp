// output_forwarder with real pipes and real writer processes (forked children that write given
// bytes in given chunk sizes): no byte lost, no line cut, back-pressure, EPIPE, per-rank files.
// Pushed streams (bytes handed over by the agent link for remote ranks) are in
// output_forwarder_pushed_test.cpp, a prompt's partial line in output_forwarder_prompt_test.cpp.
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

#include "support/output_files.hpp"

namespace {

namespace fs = std::filesystem;
using pm::output_stream;
using namespace output_forwarder_support;

std::string lines_of(std::uint32_t rank, int count, std::size_t width = 40) {
  std::string s;
  for (int i = 0; i < count; ++i) {
    std::string line = "r" + std::to_string(rank) + " l" + std::to_string(i) + " ";
    line.resize(width, static_cast<char>('a' + rank % 26));
    s += line + "\n";
  }
  return s;
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

}  // namespace
