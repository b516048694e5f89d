// Every line pmrun says to a user about its command line, in one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pm::cli {

std::string unknown_option(std::string_view arg);
std::string missing_value(std::string_view option, std::string_view metavar);
std::string unexpected_value(std::string_view option);
std::string empty_value(std::string_view option);
std::string not_a_number(std::string_view option, std::string_view value);
std::string out_of_range(std::string_view option, std::string_view value, const std::string& min,
                         const std::string& max);
std::string np_zero(std::string_view option);
std::string bad_seconds(std::string_view option, std::string_view value);
/// The same for an option where 0 means never (--dvm-idle-timeout).
std::string bad_seconds_or_zero(std::string_view option, std::string_view value);
/// --enable-recovery with --disable-recovery.
std::string recovery_both();
std::string unknown_output_mode(std::string_view option, std::string_view mode);
std::string bad_boolean(std::string_view option, std::string_view key, std::string_view value);
std::string misplaced_app_file(std::string_view option, std::string_view file);
std::string app_file_and_program(std::string_view option, std::string_view file,
                                 std::string_view program);
std::string second_app_file(std::string_view option, std::string_view first);
std::string empty_app_file(std::string_view option, std::string_view file);
std::string empty_mca_key(std::string_view option, std::string_view value);
std::string bad_variable_boolean(std::string_view variable, std::string_view value);
std::string second_hostfile(std::string_view option, std::string_view first,
                            std::string_view second);
std::string bad_interface(std::string_view option, std::string_view value, std::string_view item);
std::string not_absolute(std::string_view option, std::string_view value);
std::string bad_launch_shape(std::string_view option, std::string_view value);
std::string no_program();
std::string no_program_in_segment(std::size_t segment);
std::string refuse_root();
std::string stdin_rank_outside(std::uint32_t rank, std::uint32_t size);

}  // namespace pm::cli
