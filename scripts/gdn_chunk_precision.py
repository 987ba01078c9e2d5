#!/usr/bin/env python3
"""gdn_chunk_precision.py - how the precision of the chunked GDN form's products moves its error.

One 27B GDN head (dk = dv = 128), 512 tokens, 64-token chunks, three draws (decays from
0.007 to 0.9999): the exact recurrence in float64 against the fp32 token walk and against the
chunked (WY / UT) form with its six products computed from operands rounded as fp32, TF32 x3
(hi*hi + hi*lo + lo*hi), one TF32 pass and bf16 (float64 accumulation; the forward
substitution in fp32), as tc_gdn_chunk.cu does. Prints the largest error of the outputs and
of the final state relative to the largest value. Needs numpy; ~3 s. docs/kernels.md.
"""
import numpy as np
rng=np.random.default_rng(1)
dk=dv=128; T=512; L=64
def rnd_tf32(x):
    x=np.asarray(x,np.float32); u=x.view(np.uint32).astype(np.uint64)
    u=(u+0xfff+((u>>13)&1))&0xffffe000; return u.astype(np.uint32).view(np.float32)
def rnd_bf16(x):
    x=np.asarray(x,np.float32); u=x.view(np.uint32).astype(np.uint64)
    u=(u+0x7fff+((u>>16)&1))&0xffff0000; return u.astype(np.uint32).view(np.float32)
def mm(a,b,mode):
    a=np.asarray(a,np.float32); b=np.asarray(b,np.float32)
    if mode=='f32': return (a.astype(np.float64)@b.astype(np.float64)).astype(np.float32)
    if mode=='tf32': return (rnd_tf32(a).astype(np.float64)@rnd_tf32(b).astype(np.float64)).astype(np.float32)
    if mode=='bf16': return (rnd_bf16(a).astype(np.float64)@rnd_bf16(b).astype(np.float64)).astype(np.float32)
    if mode=='3tf32':
        ah=rnd_tf32(a); al=rnd_tf32(a-ah); bh=rnd_tf32(b); bl=rnd_tf32(b-bh)
        f=lambda x,y: x.astype(np.float64)@y.astype(np.float64)
        return (f(ah,bh)+f(ah,bl)+f(al,bh)).astype(np.float32)
def data(seed):
    r=np.random.default_rng(seed)
    q=r.standard_normal((T,dk)); q/=np.linalg.norm(q,axis=1,keepdims=True); q/=np.sqrt(dk)
    k=r.standard_normal((T,dk)); k/=np.linalg.norm(k,axis=1,keepdims=True)
    v=r.standard_normal((T,dv))
    A=-abs(r.standard_normal())-0.1 if seed%2 else -0.002
    a=r.standard_normal(T); dt=0.5*r.standard_normal()
    x=a+dt; sp=np.where(x>20,x,np.log1p(np.exp(x))); dec=np.exp(A*sp)
    beta=1/(1+np.exp(-r.standard_normal(T)))
    S0=0.1*r.standard_normal((dk,dv))
    return q,k,v,dec,beta,S0
def walk(q,k,v,dec,beta,S0,dt=np.float64):
    S=S0.astype(dt).copy(); O=np.zeros((T,dv),dt)
    for t in range(T):
        S*=dt(dec[t]); kv=S.T@k[t].astype(dt); d=(v[t]-kv)*dt(beta[t]); S+=np.outer(k[t],d).astype(dt); O[t]=S.T@q[t].astype(dt)
    return O,S
def chunked(q,k,v,dec,beta,S0,mode):
    f=np.float32; S=S0.astype(f).copy(); O=np.zeros((T,dv),f)
    q=q.astype(f);k=k.astype(f);v=v.astype(f)
    for c0 in range(0,T,L):
        Q=q[c0:c0+L];K=k[c0:c0+L];V=v[c0:c0+L];dc=dec[c0:c0+L].astype(f);b=beta[c0:c0+L].astype(f)
        n=len(Q); e=np.cumprod(dc).astype(f)
        E=np.zeros((n,n),f)
        for i in range(n):
            w=f(1)
            for j in range(i,-1,-1):
                E[i,j]=w; w*=dc[j]
        KK=mm(K,K.T,mode); QK=mm(Q,K.T,mode)
        A=np.tril(b[:,None]*KK*E,-1); M=np.tril(QK*E)
        # forward substitution fp32: (I+A) X = B
        B1=(b*e)[:,None]*K; B2=b[:,None]*V
        X1=np.zeros_like(B1); X2=np.zeros_like(B2)
        for i in range(n):
            X1[i]=B1[i]-A[i,:i]@X1[:i]; X2[i]=B2[i]-A[i,:i]@X2[:i]
        W=X1;U=X2
        Vp=U-mm(W,S,mode)
        O[c0:c0+n]=e[:,None]*mm(Q,S,mode)+mm(M,Vp,mode)
        ecol=E[n-1,:]
        S=e[-1]*S+mm((ecol[:,None]*K).T,Vp,mode)
    return O,S
for seed in (1,2,3):
    d=data(seed)
    Or,Sr=walk(*d)
    mo=abs(Or).max(); ms=abs(Sr).max()
    Ow,Sw=walk(*d,dt=np.float32)
    print(f"seed {seed} decay min {d[3].min():.4f} max {d[3].max():.4f}; walk f32: out {abs(Ow-Or).max()/mo:.2e} state {abs(Sw-Sr).max()/ms:.2e}")
    for mode in ('f32','3tf32','tf32','bf16'):
        Oc,Sc=chunked(*d,mode)
        print(f"   chunked {mode:6s}: out {abs(Oc-Or).max()/mo:.2e} state {abs(Sc-Sr).max()/ms:.2e}")
