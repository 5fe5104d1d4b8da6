// Loads the built GGUF format plugin once and opens files through its C interface, as the host does.
#pragma once

#include <cellm/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cellm::test {

const cellm_format_iface& gguf_format();

// Writes `bytes` to a fresh file in the test temp directory and returns its path.
std::string write_temp_file(const std::string& name, const std::vector<uint8_t>& bytes);

// The outcome of open(); the file is closed again right away.
struct OpenOutcome {
    cellm_status_code code;
    std::string message;
};
OpenOutcome try_open(const std::string& path);

// A file that must open; fails the current test (ADD_FAILURE) if it does not.
class OpenedModel {
public:
    explicit OpenedModel(const std::string& path);
    ~OpenedModel();
    OpenedModel(const OpenedModel&) = delete;
    OpenedModel& operator=(const OpenedModel&) = delete;

    bool ok() const { return file_ != nullptr; }
    const cellm_model_view& view() const { return view_; }
    const cellm_meta_kv* meta(const std::string& key) const;              // NULL when absent
    const cellm_tensor_info* tensor(const std::string& name) const;       // NULL when absent

private:
    cellm_model_file* file_ = nullptr;
    cellm_model_view view_{};
};

inline std::string str(cellm_string_ref s) { return std::string(s.data, s.len); }

}  // namespace cellm::test
