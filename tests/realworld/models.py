"""Small real architectures, written the way their upstreams write them.

Each is a faithful copy of the upstream block at a small width (so that the suite stays quick on
a loaded 2-core machine); when torchvision / transformers are installed, `train.py --upstream`
uses their real classes instead (ResNet's BasicBlock, GPT-2's Conv1D block).

- resnet: torchvision.models.resnet.BasicBlock (3x3 convs, BatchNorm, in-place ReLU, a 1x1
  downsample branch and the residual `out += identity`), stacked as ResNet's layer1/layer2.
- gpt2: Hugging Face GPT-2 block (transformers.pytorch_utils.Conv1D for c_attn, c_proj, c_fc:
  a `weight` of shape (in, out) and torch.addmm, not nn.Linear).
- bert: Hugging Face BERT self-attention (query, key, value: three Linear siblings reading one
  input) with its output and intermediate layers.
- lstm: pytorch/examples word_language_model RNNModel (Embedding, LSTM, Linear decoder).
- gan: pytorch/examples DCGAN (Generator and Discriminator, each an nn.Sequential `main`).
- compiled: a 3-layer nn.Sequential under torch.compile with the default backend (Inductor).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- ResNet (torchvision)
def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


def basic_block_cls(upstream):
    if upstream:
        from torchvision.models.resnet import BasicBlock as TVBasicBlock
        return TVBasicBlock
    return BasicBlock


class SmallResNet(nn.Module):
    """ResNet's stem, two stages of BasicBlocks (the second with a strided downsample), head."""

    def __init__(self, width=16, num_classes=10, upstream=False):
        super().__init__()
        block = basic_block_cls(upstream)
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(block(width, width))
        down = nn.Sequential(conv1x1(width, 2 * width, 2), nn.BatchNorm2d(2 * width))
        self.layer2 = nn.Sequential(block(width, 2 * width, 2, down))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ---------------------------------------------------------------- GPT-2 (Hugging Face)
class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer with the weight transposed."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.nx = nx
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(3 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = Conv1D(4 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, 4 * n_embd)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = GPT2Attention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = GPT2MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab=256, n_positions=64, n_embd=64, n_head=4, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList([GPT2Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# ---------------------------------------------------------------- BERT (Hugging Face)
class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.0)

    def transpose_for_scores(self, x):
        new_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        scores = scores / math.sqrt(self.attention_head_size)
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        context = torch.matmul(probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.num_attention_heads * self.attention_head_size,))


class BertLayer(nn.Module):
    def __init__(self, hidden=64, heads=4):
        super().__init__()
        self.self_attn = BertSelfAttention(hidden, heads)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.output = nn.Linear(4 * hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x):
        x = self.ln1(x + self.attn_out(self.self_attn(x)))
        return self.ln2(x + self.output(F.gelu(self.intermediate(x))))


class TinyBert(nn.Module):
    def __init__(self, vocab=256, hidden=64, layers=2, classes=4):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        self.layer = nn.ModuleList([BertLayer(hidden) for _ in range(layers)])
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, ids):
        x = self.embeddings(ids)
        for layer in self.layer:
            x = layer(x)
        return self.classifier(x[:, 0])


# ---------------------------------------------------------------- LSTM LM (pytorch/examples)
class RNNModel(nn.Module):
    def __init__(self, ntoken=256, ninp=32, nhid=64, nlayers=2, dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid
        self.nlayers = nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


# ---------------------------------------------------------------- DCGAN (pytorch/examples)
class Generator(nn.Module):
    def __init__(self, nz=16, ngf=8, nc=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, nc=3, ndf=8):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)
