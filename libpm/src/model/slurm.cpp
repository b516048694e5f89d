// Slurm allocations: hostlist expressions and tasks-per-node counts, as Slurm writes them.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "model/parse_util.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {
namespace {

constexpr std::size_t max_names = 10'000'000;

[[noreturn]] void bad(std::string_view variable, std::string_view expr, const std::string& what) {
  throw error(errc::parse,
              text::printable(std::string(variable) + " '" + std::string(expr) + "': " + what));
}

[[noreturn]] void too_many(std::string_view variable, std::string_view expr) {
  bad(variable, expr, "expands to more than " + std::to_string(max_names) + " hosts");
}

// Plain decimal numbers; 18 digits keep every value (and hi - lo) inside 64 bits.
std::optional<std::uint64_t> number(std::string_view s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  std::uint64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// One bracket body "01-04,07": checks it and returns how many numbers it holds; with `out`, also
// appends them as strings, zero padding kept (the width of the lower bound, as Slurm does).
std::uint64_t expand_ranges(std::string_view body, std::string_view variable, std::string_view expr,
                            std::vector<std::string>* out) {
  std::uint64_t count = 0;
  std::size_t pos = 0;
  while (pos <= body.size()) {
    const auto comma = body.find(',', pos);
    const auto item =
        body.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const auto dash = item.find('-');
    const auto lo_text = item.substr(0, dash);
    const auto hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    const auto lo_n = number(lo_text), hi_n = number(hi_text);
    if (!lo_n || !hi_n) bad(variable, expr, "invalid range '" + std::string(item) + "'");
    const auto lo = *lo_n, hi = *hi_n;
    if (hi < lo) bad(variable, expr, "reversed range '" + std::string(item) + "'");
    if (hi - lo >= max_names - count) too_many(variable, expr);
    count += hi - lo + 1;
    if (out) {
      const auto width = lo_text.size();
      for (auto n = lo; n <= hi; ++n) {
        std::string s = std::to_string(n);
        if (s.size() < width) s.insert(0, width - s.size(), '0');
        out->push_back(std::move(s));
      }
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return count;
}

// One item without top-level commas: "rack[1-2]-n[01-02]" -> every combination, in order. Returns
// how many names it gives; `room` is how many more the cap allows. With `out`, appends them.
std::uint64_t expand_item(std::string_view item, std::string_view variable, std::string_view expr,
                          std::uint64_t room, std::vector<std::string>* out) {
  std::uint64_t count = 1;
  std::vector<std::string> partial;
  if (out) partial.emplace_back();
  std::size_t pos = 0;
  while (pos < item.size()) {
    const auto open = item.find('[', pos);
    const auto literal =
        item.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos);
    if (literal.find(']') != std::string_view::npos) bad(variable, expr, "unbalanced ']'");
    // Numbers are digits, so valid literals make valid names: check before expanding.
    if (!literal.empty() && !model::valid_host_name(literal))
      bad(variable, expr, "invalid host name '" + std::string(item) + "'");
    for (auto& p : partial) p += literal;
    if (open == std::string_view::npos) break;
    const auto close = item.find(']', open);
    if (close == std::string_view::npos) bad(variable, expr, "unbalanced '['");
    const auto body = item.substr(open + 1, close - open - 1);
    const auto n = expand_ranges(body, variable, expr, nullptr);
    if (n > room / count) too_many(variable, expr);  // count * n > room, without overflow
    count *= n;
    if (out) {
      std::vector<std::string> numbers;
      expand_ranges(body, variable, expr, &numbers);
      std::vector<std::string> next;
      next.reserve(partial.size() * numbers.size());
      for (const auto& p : partial) {
        for (const auto& num : numbers) next.push_back(p + num);
      }
      partial = std::move(next);
    }
    pos = close + 1;
  }
  if (count > room) too_many(variable, expr);
  if (out)
    out->insert(out->end(), std::make_move_iterator(partial.begin()),
                std::make_move_iterator(partial.end()));
  return count;
}

std::optional<std::string> get(const env_map& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr, std::string_view variable) {
  if (expr.empty()) bad(variable, expr, "empty host list");
  // Items split at commas outside brackets.
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= expr.size(); ++i) {
    if (i < expr.size() && expr[i] == '[') {
      if (++depth > 1) bad(variable, expr, "nested '['");
    } else if (i < expr.size() && expr[i] == ']') {
      if (--depth < 0) bad(variable, expr, "unbalanced ']'");
    } else if (i == expr.size() || (expr[i] == ',' && depth == 0)) {
      if (i == expr.size() && depth != 0) bad(variable, expr, "unbalanced '['");
      const auto item = expr.substr(start, i - start);
      if (item.empty()) bad(variable, expr, "empty host name");
      items.push_back(item);
      start = i + 1;
    }
  }
  // Count first, so that an oversized list is refused before any memory is spent on it.
  std::uint64_t total = 0;
  for (const auto item : items)
    total += expand_item(item, variable, expr, max_names - total, nullptr);
  std::vector<std::string> out;
  out.reserve(total);
  for (const auto item : items) expand_item(item, variable, expr, max_names, &out);
  return out;
}

std::vector<std::uint32_t> parse_tasks_per_node(std::string_view text, std::size_t nodes,
                                                std::string_view variable) {
  std::vector<std::uint32_t> out;
  std::size_t pos = 0;
  if (text.empty()) bad(variable, text, "empty value");
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    auto item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    std::uint32_t repeat = 1;
    auto paren = item.find('(');
    auto count_text = item.substr(0, paren);
    if (paren != std::string_view::npos) {
      // "2(x3)": 2 on each of 3 nodes.
      if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')') {
        bad(variable, text, "invalid item '" + std::string(item) + "'");
      }
      auto r = model::positive_count(item.substr(paren + 2, item.size() - paren - 3));
      if (!r) bad(variable, text, "invalid repeat in '" + std::string(item) + "'");
      repeat = *r;
    }
    auto count = model::positive_count(count_text);
    if (!count) bad(variable, text, "invalid count '" + std::string(count_text) + "'");
    if (out.size() + repeat > nodes) {
      bad(variable, text,
          "describes more than the " + std::to_string(nodes) + " nodes of the allocation");
    }
    out.insert(out.end(), repeat, *count);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (out.size() != nodes) {
    bad(variable, text,
        "describes " + std::to_string(out.size()) + " nodes, the allocation has " +
            std::to_string(nodes));
  }
  return out;
}

std::optional<allocation> slurm_allocation(const env_map& env) {
  if (!get(env, "SLURM_JOB_ID") && !get(env, "SLURM_JOBID")) return std::nullopt;
  const bool in_step = get(env, "SLURM_STEP_NODELIST").has_value();
  const char* list_var = in_step                          ? "SLURM_STEP_NODELIST"
                         : get(env, "SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                                                          : "SLURM_NODELIST";
  auto list = get(env, list_var);
  if (!list) return std::nullopt;
  allocation out;
  out.source = allocation_source::slurm;
  const auto names = expand_hostlist(*list, list_var);
  std::vector<std::uint32_t> slots(names.size(), 1);
  // Inside a step only the step's counts describe the step's nodes; the job-wide variables
  // describe the job's nodes and would not line up with the step's list.
  const std::vector<const char*> count_vars =
      in_step ? std::vector<const char*>{"SLURM_STEP_TASKS_PER_NODE"}
              : std::vector<const char*>{"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"};
  for (const char* var : count_vars) {
    if (auto text = get(env, var)) {
      slots = parse_tasks_per_node(*text, names.size(), var);
      break;
    }
  }
  std::uint32_t cpus_per_task = 1;
  if (auto cpt = get(env, "SLURM_CPUS_PER_TASK")) {
    auto n = model::positive_count(*cpt);
    if (!n) bad("SLURM_CPUS_PER_TASK", *cpt, "expected a positive integer");
    cpus_per_task = *n;
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    // As Open MPI: the slots per node divided by the CPUs each task uses, at least one.
    out.hosts.push_back(host{names[i], std::max<std::uint32_t>(1, slots[i] / cpus_per_task)});
  }
  return out;
}

}  // namespace pm
