"""Small models in plain torch for the torch.compile backend's tests (CPU and GPU)."""
import torch
import torch.nn.functional as F


class MLP(torch.nn.Module):
    def __init__(self, d, h, o):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, h), torch.nn.Linear(h, o)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.gate = torch.nn.Linear(d, h, bias=False)
        self.up = torch.nn.Linear(d, h, bias=False)
        self.down = torch.nn.Linear(h, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x * 0.5, dim=-1)


class Residual(torch.nn.Module):
    """x + mlp(norm(x)): residual adds around a norm and an MLP."""
    def __init__(self, d, h):
        super().__init__()
        self.norm, self.mlp = RMSNorm(d), SwiGLU(d, h)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Block(torch.nn.Module):
    """A LLaMA-style block: RMSNorm, attention (matmul + causal softmax, rotary), SwiGLU,
    residuals."""
    def __init__(self, d, heads, h):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.mlp = SwiGLU(d, h)

    @staticmethod
    def rotary(x):
        t, dh = x.shape[-2], x.shape[-1]
        freq = 1.0 / (10000 ** (torch.arange(0, dh, 2, device=x.device, dtype=torch.float32) / dh))
        ang = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * freq
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        q, k = self.rotary(q), self.rotary(k)
        s = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        a = (p @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(a)
        return x + self.mlp(self.n2(x))


class GPT2Block(torch.nn.Module):
    """A GPT-2-style block: LayerNorm, causal scaled_dot_product_attention, GELU-tanh MLP,
    residuals."""
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        for ln in (self.ln1, self.ln2):          # not the identity: its gradient matters
            torch.nn.init.normal_(ln.weight, 1.0, 0.1)
            torch.nn.init.normal_(ln.bias, 0.0, 0.1)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class GPT2(torch.nn.Module):
    """Token and learned position embeddings, GPT-2 blocks, a final LayerNorm and an LM
    head; forward(idx, targets) is the mean cross-entropy over int64 targets."""
    def __init__(self, vocab, seq, d, heads, layers=1):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(GPT2Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
