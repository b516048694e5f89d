// output_forwarder with pushed streams (bytes handed over by the agent link for remote ranks),
// alone and mixed with pipes: in random chunks, every mode, whole lines in order; congestion
// pauses the producer and resumes it; a closed destination; the end of a pushed stream.
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

// A restarted rank (docs/resilience.md) opens its streams again once the earlier ones ended: its
// lines go on, and its per-rank file keeps the earlier incarnation's output before the new one's.
TEST(OutputForwarder, ARestartedRanksStreamsOpenAgainAndItsFileGoesOn) {
  temp_dir dir;
  pm::output_options opt;
  std::vector<std::string> lines;
  opt.sink = [&](std::uint32_t, output_stream, std::string_view line, pm::line_flags) {
    lines.emplace_back(line);
  };
  opt.output_dir = dir.file("od");
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  int ends = 0;
  fwd.open_stream(0, output_stream::out, [&](std::uint64_t) { ++ends; });
  fwd.push(0, output_stream::out, std::string_view("first\n"));
  fwd.close_stream(0, output_stream::out);
  // From a pipe this time (a local rank), after the pushed one ended.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  fwd.attach(0, output_stream::out, p[0], [&](std::uint64_t) { ++ends; });
  ASSERT_EQ(::write(p[1], "second\n", 7), 7);
  ::close(p[1]);
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(10));
  EXPECT_TRUE(drained);
  EXPECT_EQ(ends, 2);
  EXPECT_EQ(lines, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(slurp(dir.file("od/1/rank.0/stdout")), "first\nsecond\n");
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
