import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-LN encoder block with bidirectional multi-head attention through
    F.scaled_dot_product_attention."""

    def __init__(self, dim, num_heads, mlp_dim):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class Model(nn.Module):
    """Mini Vision Transformer: conv patch embedding, class token, learned position embedding,
    one encoder block, final LayerNorm and a linear head on the class token."""

    def __init__(self, image_size, patch_size, in_channels, embed_dim, num_heads, mlp_dim, num_classes):
        super().__init__()
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_channels, embed_dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.block = Block(embed_dim, num_heads, mlp_dim)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (b, patches, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.block(x)
        x = self.norm(x)
        return self.head(x[:, 0])


batch_size = 32
image_size = 224
patch_size = 16
in_channels = 3
embed_dim = 768
num_heads = 12
mlp_dim = 3072
num_classes = 1000


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch_size, in_channels, embed_dim, num_heads, mlp_dim, num_classes]


HARNESS_META = {
    "level": 3,
    "dtype": "fp32",
    "small": {"batch_size": 2, "image_size": 32, "patch_size": 8, "embed_dim": 32, "num_heads": 4,
              "mlp_dim": 64, "num_classes": 10},
    "extra_shapes": [{"batch_size": 3}],
}
