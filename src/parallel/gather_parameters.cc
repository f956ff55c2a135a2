// Full parameters from every stage and tensor-parallel part, on rank 0.
#include "ht/parallel/gather_parameters.h"

#include <cstring>

#include "ht/nn/tensor_parallel.h"
#include "ht/ops/cast.h"

namespace ht::parallel {
namespace {

// What travels ahead of each parameter: its name's length, its layout and
// its local shape (at most 2-D), as i32.
constexpr int kHeader = 8;

struct Piece {
  std::string name;
  nn::ParamLayout layout;
  Tensor data;  // host, local shape
};

Tensor header_of(const Piece& piece) {
  const Shape& s = piece.data.shape();
  HT_CHECK(s.size() <= 2, ErrorKind::kInternal, "gather_full_parameters: parameter {} has {} dimensions",
           piece.name, s.size());
  const nn::ParamLayout& l = piece.layout;
  std::vector<std::int32_t> h = {std::int32_t(piece.name.size()), l.tp_split_dim, l.tp_parts, l.tp_size,
                                 l.pp_tied_copy ? 1 : 0,            std::int32_t(s.size()),
                                 s.size() > 0 ? std::int32_t(s[0]) : 0, s.size() > 1 ? std::int32_t(s[1]) : 0};
  return Tensor::from_vector(h, {kHeader});
}

// This rank's parameters; `experts_only`: its routed experts alone.
std::vector<Piece> local_pieces(nn::Model& model, bool experts_only) {
  std::vector<Piece> out;
  for (nn::Parameter* p : model.parameters()) {
    if (experts_only && !p->layout().expert) continue;
    Tensor values = Tensor::empty(p->shape(), DType::kF32, p->data().device());
    ops::cast(p->data(), values);
    out.push_back({p->name(), p->layout(), values.to(Device::cpu())});
  }
  return out;
}

void send_pieces(comm::Communicator& world, const std::vector<Piece>& pieces, int dst) {
  world.send(Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(pieces.size())}, {1}), dst)->wait();
  for (const Piece& piece : pieces) {
    world.send(header_of(piece), dst)->wait();
    std::vector<std::int32_t> chars(piece.name.begin(), piece.name.end());
    world.send(Tensor::from_vector(chars, {std::int64_t(chars.size())}), dst)->wait();
    world.send(piece.data, dst)->wait();
  }
}

std::vector<Piece> recv_pieces(comm::Communicator& world, int src) {
  Tensor count = Tensor::empty({1}, DType::kI32);
  world.recv(count, src)->wait();
  std::vector<Piece> out;
  for (std::int32_t i = 0; i < count.data<std::int32_t>()[0]; ++i) {
    Tensor header = Tensor::empty({kHeader}, DType::kI32);
    world.recv(header, src)->wait();
    const std::int32_t* h = header.data<std::int32_t>();
    Tensor chars = Tensor::empty({h[0]}, DType::kI32);
    world.recv(chars, src)->wait();
    Piece piece;
    for (std::int32_t c : chars.to_vector<std::int32_t>()) piece.name.push_back(char(c));
    piece.layout = {.tp_split_dim = h[1], .tp_rank = 0, .tp_size = h[3], .tp_parts = h[2], .pp_tied_copy = h[4] != 0};
    Shape shape;
    for (int d = 0; d < h[5]; ++d) shape.push_back(h[6 + d]);
    piece.data = Tensor::empty(shape, DType::kF32);
    world.recv(piece.data, src)->wait();
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace

std::map<std::string, Tensor> gather_full_parameters(nn::Model& model, DataParallel& dp, comm::DeviceMesh& mesh) {
  const comm::MeshShape& shape = mesh.shape();
  comm::Communicator& world = mesh.world();
  dp.gather_all();
  std::map<std::string, std::vector<Tensor>> parts;  // name -> part per tp rank
  std::map<std::string, nn::ParamLayout> layouts;
  std::map<std::string, Tensor> tied_copies;
  // Every stage and tp part from dp rank 0; the routed experts of the
  // other ranks of its expert-parallel run from them.
  for (int pp = 0; pp < shape.pp_size(); ++pp)
    for (int tp = 0; tp < shape.tp_size(); ++tp)
      for (int ep = 0; ep < mesh.ep_size(); ++ep) {
        const int src = shape.rank({.tp_rank = tp, .dp_rank = ep, .pp_rank = pp});
        if (world.rank() == src && src != 0) send_pieces(world, local_pieces(model, ep > 0), 0);
        if (world.rank() != 0) continue;
        for (Piece& piece : src == 0 ? local_pieces(model, false) : recv_pieces(world, src)) {
          if (piece.layout.pp_tied_copy) {
            auto& list = parts[piece.name + "#tied"];
            list.push_back(piece.data);
            layouts[piece.name + "#tied"] = piece.layout;
            continue;
          }
          parts[piece.name].push_back(piece.data);
          layouts[piece.name] = piece.layout;
        }
      }
  dp.release_all();
  std::map<std::string, Tensor> full;
  for (auto& [name, list] : parts) {
    const Tensor whole = nn::tp_assemble(list, layouts[name]);
    const auto hash = name.find("#tied");
    if (hash == std::string::npos) {
      full[name] = whole;
    } else {
      tied_copies[name.substr(0, hash)] = whole;
    }
  }
  for (const auto& [name, copy] : tied_copies) {
    const auto it = full.find(name);
    HT_CHECK(it != full.end() && it->second.to_vector<float>() == copy.to_vector<float>(), ErrorKind::kInternal,
             "the last pipeline stage's copy of the tied weight {} differs from the first stage's", name);
  }
  return full;
}

void load_full_parameters(nn::Model& model, const std::map<std::string, Tensor>& full) {
  for (nn::Parameter* p : model.parameters()) {
    const auto it = full.find(p->name());
    HT_CHECK_ARG(it != full.end(), "load_full_parameters: no values for parameter {}", p->name());
    HT_CHECK_ARG(it->second.shape() == p->full_shape(), "load_full_parameters: {} is {} where the model has {}",
                 p->name(), shape_str(it->second.shape()), shape_str(p->full_shape()));
    p->data().copy_from(nn::tp_part_of(it->second, p->layout()).to(p->data().device()));
  }
}

}  // namespace ht::parallel
