#include "agent/pmix_channel.hpp"

#include <concepts>
#include <cstddef>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "pm/error.hpp"

namespace pm::agent::pmix_channel {

namespace {

[[noreturn]] void malformed(const std::string& what) {
  throw pm::error(errc::launch, "PMIx helper channel: " + what);
}

// The two archives have the same members, so that one field list (io below) serves both: the
// writer reads the fields it is given, the reader assigns them.
struct writer {
  static constexpr bool reading = false;
  std::string out;

  template <std::integral I>
  void integer(I& v) {
    if constexpr (std::is_same_v<I, bool>) {
      out.push_back(v ? '\1' : '\0');
    } else {
      const auto u = static_cast<std::make_unsigned_t<I>>(v);
      for (std::size_t i = 0; i < sizeof(I); ++i) out.push_back(static_cast<char>(u >> (8 * i)));
    }
  }
  std::size_t count(std::size_t n) {
    // Far beyond any frame (pmix_helper_frames.hpp): a bug, said here rather than sent wrapped.
    if (n > std::numeric_limits<std::uint32_t>::max()) {
      malformed(std::to_string(n) + " items, more than a message holds");
    }
    auto m = static_cast<std::uint32_t>(n);
    integer(m);
    return n;
  }
  template <class C>
  void chars(C& c) {
    count(c.size());
    out.append(c.data(), c.size());
  }
};

struct reader {
  static constexpr bool reading = true;
  std::string_view in;

  std::string_view take(std::size_t n) {
    if (n > in.size()) malformed("a truncated message");
    const std::string_view s = in.substr(0, n);
    in.remove_prefix(n);
    return s;
  }
  template <std::integral I>
  void integer(I& v) {
    if constexpr (std::is_same_v<I, bool>) {
      std::uint8_t b = 0;
      integer(b);
      if (b > 1) malformed("a flag of " + std::to_string(b));
      v = b == 1;
    } else {
      using U = std::make_unsigned_t<I>;
      const std::string_view s = take(sizeof(I));
      U u = 0;
      for (std::size_t i = 0; i < sizeof(I); ++i) {
        u = static_cast<U>(u | static_cast<U>(static_cast<unsigned char>(s[i])) << (8 * i));
      }
      v = static_cast<I>(u);
    }
  }
  // Every counted item takes at least a byte: a count beyond the bytes left is refused before
  // anything is allocated for it.
  std::size_t count(std::size_t) {
    std::uint32_t n = 0;
    integer(n);
    if (n > in.size()) {
      malformed("a count of " + std::to_string(n) + " with " + std::to_string(in.size()) +
                " bytes left");
    }
    return n;
  }
  template <class C>
  void chars(C& c) {
    const std::string_view s = take(count(0));
    c.assign(s.begin(), s.end());
  }
};

// ---- the encoding of each kind of field ----
// Calls to io are resolved at instantiation by argument-dependent lookup on the archive (declared
// in this namespace), so the overloads below may use one another in any order.

template <class A, std::integral I>
void io(A& a, I& v) {
  a.integer(v);
}

// Each enum's last value, to refuse others on decode (a new enumerator must be named here).
constexpr auto last(pmix::status) {
  return pmix::status::partial_success;
}
constexpr auto last(pmix::proc_state) {
  return pmix::proc_state::comm_lost;
}
constexpr auto last(pm::notice_kind) {
  return pm::notice_kind::rank_unfinalized;
}

template <class A, class E>
requires std::is_enum_v<E>
void io(A& a, E& v) {
  using U = std::underlying_type_t<E>;
  auto u = static_cast<U>(v);
  a.integer(u);
  if constexpr (A::reading) {
    if (std::cmp_less(u, 0) || std::cmp_greater(u, static_cast<U>(last(E{})))) {
      malformed("an enum value " + std::to_string(u) + " out of range");
    }
    v = static_cast<E>(u);
  }
}

template <class A>
void io(A& a, std::string& s) {
  a.chars(s);
}
template <class A>
void io(A& a, std::vector<char>& s) {
  a.chars(s);
}

template <class A, class T>
void io(A& a, std::vector<T>& v) {
  static_assert(!std::is_empty_v<T>, "reader::count relies on items of a byte or more");
  const std::size_t n = a.count(v.size());
  if constexpr (A::reading) {
    // Grown item by item (no reserve): memory follows the bytes actually decoded.
    v.clear();
    for (std::size_t i = 0; i < n; ++i) io(a, v.emplace_back());
  } else {
    for (auto& x : v) io(a, x);
  }
}

template <class A, class T>
void io(A& a, std::optional<T>& o) {
  bool has = o.has_value();
  a.integer(has);
  if constexpr (A::reading) {
    o.reset();
    if (has) io(a, o.emplace());
  } else if (has) {
    io(a, *o);
  }
}

template <class A>
void io(A&, std::monostate&) {}

template <class A, class... T>
void io(A& a, std::variant<T...>& v) {
  static_assert(sizeof...(T) <= 256);
  auto index = static_cast<std::uint8_t>(v.index());
  a.integer(index);
  if constexpr (A::reading) {
    if (index >= sizeof...(T)) malformed("an unknown variant index " + std::to_string(index));
    // The alternative is built in place by index: its types need not be distinct.
    const auto pick = [&]<std::size_t... I>(std::index_sequence<I...>) {
      (void)((index == I && (io(a, v.template emplace<I>()), true)) || ...);
    };
    pick(std::index_sequence_for<T...>{});
  } else {
    std::visit([&](auto& x) { io(a, x); }, v);
  }
}

template <class A, class... T>
void each(A& a, T&... v) {
  (io(a, v), ...);
}

// ---- the field list of each struct, for both directions ----
// A structured binding names every field: a field added to one of these structs stops the build
// here until it is listed, so that the channel never drops it silently.
#define PM_CHANNEL_FIELDS(T, ...) \
  template <class A>              \
  void io(A& a, T& x) {           \
    auto& [__VA_ARGS__] = x;      \
    each(a, __VA_ARGS__);         \
  }

PM_CHANNEL_FIELDS(pmix::proc, nspace, rank)
PM_CHANNEL_FIELDS(pmix::server_place, dir, shm_dir, hostname, port, server_pid)
PM_CHANNEL_FIELDS(pmix::rank_info, app, node, local_rank, node_rank, cpus)
PM_CHANNEL_FIELDS(pmix::job_info, nspace, universe_size, node_index, node_names, ranks, spawned,
                  parent)
PM_CHANNEL_FIELDS(pmix::proc_entry, who, hostname, executable, pid, exit_code, state)
PM_CHANNEL_FIELDS(pmix::query_value, key, value)
PM_CHANNEL_FIELDS(pmix::found_value, key, publisher, value)
PM_CHANNEL_FIELDS(pmix::published_value, key, value)
PM_CHANNEL_FIELDS(pmix::spawn_app, argv, env, wdir, max_procs, hosts)
PM_CHANNEL_FIELDS(pmix::query, keys, nspace, rank, hostname)
PM_CHANNEL_FIELDS(pmix::event_notice, nspace, kind, ranks, code, host, text)
PM_CHANNEL_FIELDS(link::pmix_job, nspace, universe, node, nodes, rank_node, rank_app, rank_local,
                  parent_nspace, parent_rank)

// pmd to the helper.
PM_CHANNEL_FIELDS(setup, job, place)
PM_CHANNEL_FIELDS(rank_bound, rank, cpus)
PM_CHANNEL_FIELDS(pmix_complete, id, status, payload)
PM_CHANNEL_FIELDS(pmix_serve_modex, link_id, target)
PM_CHANNEL_FIELDS(pmix_register_job, job, local_ranks)
PM_CHANNEL_FIELDS(pmix_host_named, hostname)
PM_CHANNEL_FIELDS(pmix_notify_ranks, notice)
PM_CHANNEL_FIELDS(pmix_restart, dropped, job)
PM_CHANNEL_FIELDS(pmix_reregister, nspace, rank)

// The helper to pmd.
PM_CHANNEL_FIELDS(pmix_abort_called, id, caller, status, message)
PM_CHANNEL_FIELDS(pmix_fence_called, id, participants, collect, data)
PM_CHANNEL_FIELDS(pmix_connect_called, id, participants)
PM_CHANNEL_FIELDS(pmix_spawn_called, id, requester, apps)
PM_CHANNEL_FIELDS(pmix_publish_called, id, publisher, values)
PM_CHANNEL_FIELDS(pmix_lookup_called, id, requester, keys, wait, timeout_s)
PM_CHANNEL_FIELDS(pmix_unpublish_called, id, requester, keys)
PM_CHANNEL_FIELDS(pmix_query_called, id, requester, queries)
PM_CHANNEL_FIELDS(pmix_modex_called, id, target)
PM_CHANNEL_FIELDS(pmix_client_connected, who)
PM_CHANNEL_FIELDS(pmix_client_finalized, who)
PM_CHANNEL_FIELDS(pmix_local_modex_answered, link_id, found, data)
PM_CHANNEL_FIELDS(pmix_server_said, line)
template <class A>
void io(A&, pmix_server_up&) {}
template <class A>
void io(A&, pmix_server_failed&) {}

#undef PM_CHANNEL_FIELDS

// The writer only reads the fields; the cast lets it share the reader's (non-const) field lists.
template <class T>
std::string encode_body(const T& m) {
  writer w;
  io(w, const_cast<T&>(m));
  return std::move(w.out);
}

template <class T>
T decode_body(std::string_view body) {
  reader r{body};
  T m;
  io(r, m);
  if (!r.in.empty()) malformed(std::to_string(r.in.size()) + " bytes after the message");
  return m;
}

}  // namespace

std::string encode(const to_helper& m) {
  return encode_body(m);
}
std::string encode(const pmix_event& e) {
  return encode_body(e);
}
to_helper decode_to_helper(std::string_view body) {
  return decode_body<to_helper>(body);
}
pmix_event decode_event(std::string_view body) {
  return decode_body<pmix_event>(body);
}

}  // namespace pm::agent::pmix_channel
