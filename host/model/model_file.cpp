#include "model/model_file.h"

#include "error.h"
#include "plugin/host_api.h"

#include <array>
#include <cstddef>
#include <fstream>

namespace fs = std::filesystem;

namespace cellm {

std::string_view to_string_view(const cellm_string_ref& s) { return {s.data, static_cast<size_t>(s.len)}; }

const char* dtype_name(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_F32: return "F32";
    case CELLM_TYPE_F16: return "F16";
    case CELLM_TYPE_BF16: return "BF16";
    case CELLM_TYPE_Q4_0: return "Q4_0";
    case CELLM_TYPE_Q4_1: return "Q4_1";
    case CELLM_TYPE_Q5_0: return "Q5_0";
    case CELLM_TYPE_Q5_1: return "Q5_1";
    case CELLM_TYPE_Q8_0: return "Q8_0";
    case CELLM_TYPE_Q8_1: return "Q8_1";
    case CELLM_TYPE_Q2_K: return "Q2_K";
    case CELLM_TYPE_Q3_K: return "Q3_K";
    case CELLM_TYPE_Q4_K: return "Q4_K";
    case CELLM_TYPE_Q5_K: return "Q5_K";
    case CELLM_TYPE_Q6_K: return "Q6_K";
    case CELLM_TYPE_Q8_K: return "Q8_K";
    case CELLM_TYPE_I8: return "I8";
    case CELLM_TYPE_I16: return "I16";
    case CELLM_TYPE_I32: return "I32";
    case CELLM_TYPE_I64: return "I64";
    case CELLM_TYPE_F64: return "F64";
    case CELLM_TYPE_I8S_G32: return "I8S_G32";
    case CELLM_TYPE_I8S_G64: return "I8S_G64";
    case CELLM_TYPE_I8S_G128: return "I8S_G128";
    case CELLM_TYPE_I4S_G32: return "I4S_G32";
    case CELLM_TYPE_I4S_G64: return "I4S_G64";
    case CELLM_TYPE_I4S_G128: return "I4S_G128";
    case CELLM_TYPE_Q4A_G32: return "Q4A_G32";
    case CELLM_TYPE_Q4A_G64: return "Q4A_G64";
    case CELLM_TYPE_Q4A_G128: return "Q4A_G128";
    case CELLM_TYPE_R4: return "R4";
    case CELLM_TYPE_R3: return "R3";
    default: return "unknown";
    }
}

std::unique_ptr<ModelFile> ModelFile::open(const PluginRegistry& registry, const fs::path& path,
                                           std::string_view format) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw Error("model '" + path.string() + "' does not exist");

    const Plugin* plugin = nullptr;
    if (!format.empty()) {
        plugin = registry.find(CELLM_PLUGIN_FORMAT, format);
        if (plugin == nullptr) {
            throw Error("unknown format '" + std::string(format) + "' (format plugins: " +
                        registry.names(CELLM_PLUGIN_FORMAT) + ")");
        }
    } else {
        std::array<uint8_t, 64> head{};
        size_t head_len = 0;
        if (!fs::is_directory(path, ec)) {
            std::ifstream in(path, std::ios::binary);
            if (!in) throw Error("model '" + path.string() + "' cannot be read");
            in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
            head_len = static_cast<size_t>(in.gcount());
        }
        int best = 0;
        for (const Plugin* p : registry.plugins(CELLM_PLUGIN_FORMAT)) {
            int score = p->format()->probe(path.c_str(), head.data(), head_len);
            if (score > best) {
                best = score;
                plugin = p;
            }
        }
        if (plugin == nullptr) {
            throw Error("model '" + path.string() + "': no format plugin recognises this file (format plugins: " +
                        registry.names(CELLM_PLUGIN_FORMAT) + ")");
        }
    }

    std::unique_ptr<ModelFile> model(new ModelFile());
    model->format_ = plugin;
    model->path_ = path;
    if (fs::is_directory(path, ec)) {
        // A model folder's size is that of the files in it (weights, config, tokenizer).
        for (const auto& entry : fs::directory_iterator(path, ec)) {
            std::error_code size_ec;
            const uint64_t size = entry.is_regular_file(size_ec) ? entry.file_size(size_ec) : 0;
            if (!size_ec) model->file_size_ += size;
        }
    } else {
        model->file_size_ = fs::file_size(path, ec);
    }
    check(plugin->format()->open(path.c_str(), &model->file_), "cannot open model");
    model->view_.struct_size = sizeof(cellm_model_view);
    check(plugin->format()->get_view(model->file_, &model->view_), "cannot read model");
    validate(model->view_, path.string() + " (format plugin '" + plugin->name() + "')");
    return model;
}

// A format plugin is third-party code reading untrusted files: the host checks the view it hands over before
// anything indexes with it.
void ModelFile::validate(const cellm_model_view& view, const std::string& where) {
    auto fail = [&](const std::string& what) { throw Error(where + ": " + what); };
    if (view.n_tensors > 0 && (view.tensors == nullptr || view.tensor_stride < offsetof(cellm_tensor_info, size) + sizeof(uint64_t))) {
        fail("tensor table is missing or its stride is too small");
    }
    if (view.n_meta > 0 && view.meta == nullptr) fail("metadata table is missing");
    const auto* map_begin = static_cast<const char*>(view.mapping);
    for (uint64_t i = 0; i < view.n_tensors; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&view, i);
        std::string name = "tensor #" + std::to_string(i);
        if (t->name.data != nullptr) name.assign(t->name.data, static_cast<size_t>(t->name.len));
        const int64_t block = cellm_dtype_block_size(t->type);
        if (block == 0) fail("tensor '" + name + "' has unknown type " + std::to_string(t->type));
        if (t->n_dims < 1 || t->n_dims > CELLM_MAX_DIMS) fail("tensor '" + name + "' has " + std::to_string(t->n_dims) + " dimensions");
        uint64_t elements = 1;
        for (uint32_t d = 0; d < CELLM_MAX_DIMS; ++d) {
            const int64_t ne = t->ne[d];
            if (ne < 1 || (d >= t->n_dims && ne != 1) || ne > (int64_t{1} << 40)) fail("tensor '" + name + "' has a bad shape");
            if (elements > (uint64_t{1} << 40) / static_cast<uint64_t>(ne)) fail("tensor '" + name + "' is too large");
            elements *= static_cast<uint64_t>(ne);
        }
        if (t->ne[0] % block != 0) fail("tensor '" + name + "' rows are not whole blocks of its type");
        const uint64_t bytes = elements / static_cast<uint64_t>(block) * static_cast<uint64_t>(cellm_dtype_type_size(t->type));
        if (t->size != bytes) fail("tensor '" + name + "' is " + std::to_string(t->size) + " bytes, its shape needs " + std::to_string(bytes));
        if (t->data == nullptr) fail("tensor '" + name + "' has no data");
        if (map_begin != nullptr) {
            const auto* data = static_cast<const char*>(t->data);
            if (data < map_begin || static_cast<uint64_t>(data - map_begin) > view.mapping_size ||
                view.mapping_size - static_cast<uint64_t>(data - map_begin) < bytes) {
                fail("tensor '" + name + "' lies outside the mapped file");
            }
        }
    }
}

std::unique_ptr<ModelFile> ModelFile::compose(std::vector<std::unique_ptr<ModelFile>> parts, Tables tables) {
    if (parts.empty()) throw Error("a composed model view needs at least one file");
    std::unique_ptr<ModelFile> model(new ModelFile());
    model->format_ = parts.front()->format_;
    model->path_ = parts.front()->path_;
    for (const auto& part : parts) model->file_size_ += part->file_size_;
    model->parts_ = std::move(parts);
    model->tables_ = std::move(tables);
    model->view_.struct_size = sizeof(cellm_model_view);
    model->view_.n_meta = model->tables_.meta.size();
    model->view_.meta = model->tables_.meta.data();
    model->view_.n_tensors = model->tables_.tensors.size();
    model->view_.tensors = model->tables_.tensors.data();
    model->view_.tensor_stride = sizeof(cellm_tensor_info);
    return model;
}

std::vector<MappedRegion> ModelFile::regions() const {
    std::vector<MappedRegion> out;
    if (view_.mapping != nullptr) out.push_back({view_.mapping, view_.mapping_size});
    for (const auto& part : parts_) {
        for (const MappedRegion& r : part->regions()) out.push_back(r);
    }
    return out;
}

ModelFile::~ModelFile() {
    if (file_ != nullptr) format_->format()->close(file_);
}

const cellm_meta_value* ModelFile::find(std::string_view key) const {
    for (uint64_t i = 0; i < view_.n_meta; ++i) {
        if (to_string_view(view_.meta[i].key) == key) return &view_.meta[i].value;
    }
    return nullptr;
}

namespace {
[[noreturn]] void wrong_type(std::string_view key, const char* expected) {
    throw Error("metadata key '" + std::string(key) + "' is not " + expected);
}
bool is_integer(cellm_value_type t) {
    switch (t) {
    case CELLM_VALUE_U8: case CELLM_VALUE_I8: case CELLM_VALUE_U16: case CELLM_VALUE_I16: case CELLM_VALUE_U32:
    case CELLM_VALUE_I32: case CELLM_VALUE_U64: case CELLM_VALUE_I64: return true;
    default: return false;
    }
}
bool is_signed(cellm_value_type t) {
    return t == CELLM_VALUE_I8 || t == CELLM_VALUE_I16 || t == CELLM_VALUE_I32 || t == CELLM_VALUE_I64;
}
}  // namespace

std::optional<std::string> ModelFile::get_string(std::string_view key) const {
    const cellm_meta_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != CELLM_VALUE_STRING) wrong_type(key, "a string");
    return std::string(to_string_view(v->v.str));
}

std::optional<int64_t> ModelFile::get_int(std::string_view key) const {
    const cellm_meta_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!is_integer(v->type)) wrong_type(key, "an integer");
    return is_signed(v->type) ? v->v.i64 : static_cast<int64_t>(v->v.u64);
}

std::optional<double> ModelFile::get_float(std::string_view key) const {
    const cellm_meta_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type == CELLM_VALUE_F32 || v->type == CELLM_VALUE_F64) return v->v.f64;
    if (is_integer(v->type)) return is_signed(v->type) ? static_cast<double>(v->v.i64) : static_cast<double>(v->v.u64);
    wrong_type(key, "a number");
}

std::optional<bool> ModelFile::get_bool(std::string_view key) const {
    const cellm_meta_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != CELLM_VALUE_BOOL) wrong_type(key, "a boolean");
    return v->v.u64 != 0;
}

const cellm_tensor_info* ModelFile::tensor(std::string_view name) const {
    for (uint64_t i = 0; i < view_.n_tensors; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&view_, i);
        if (to_string_view(t->name) == name) return t;
    }
    return nullptr;
}

}  // namespace cellm
