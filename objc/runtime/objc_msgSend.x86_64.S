// objc_msgSend for x86-64 System V: find the method for (receiver, selector) and jump to it with every argument
// register as the caller left it (rdi rsi rdx rcx r8 r9, xmm0-7, and al, the vector-register count of a variadic
// call), so that the method sees the call as if made to it directly. The lookup is objc_msg_lookup (runtime.cpp).
// A nil receiver returns zero in rax, rdx, xmm0 and xmm1, whatever the method's return type.
//
// objc_msgSend_stret is the same for methods returning a struct in memory: the hidden result pointer is in rdi,
// so the receiver is in rsi and the selector in rdx. A nil receiver leaves the result alone (clang zeroes it).

#if defined(__x86_64__) && defined(__ELF__)

    .text

// Saves the argument registers, calls objc_msg_lookup(\receiver, \selector), restores them, leaves the IMP in r11.
.macro LOOKUP receiver, selector
    push    %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    mov     %rsp, %rbp
    .cfi_def_cfa_register %rbp
    sub     $192, %rsp              // 8 xmm (128) + 7 general (56), rounded to keep rsp 16-aligned
    movdqa  %xmm0, 0(%rsp)
    movdqa  %xmm1, 16(%rsp)
    movdqa  %xmm2, 32(%rsp)
    movdqa  %xmm3, 48(%rsp)
    movdqa  %xmm4, 64(%rsp)
    movdqa  %xmm5, 80(%rsp)
    movdqa  %xmm6, 96(%rsp)
    movdqa  %xmm7, 112(%rsp)
    mov     %rdi, 128(%rsp)
    mov     %rsi, 136(%rsp)
    mov     %rdx, 144(%rsp)
    mov     %rcx, 152(%rsp)
    mov     %r8, 160(%rsp)
    mov     %r9, 168(%rsp)
    mov     %rax, 176(%rsp)
    mov     \receiver, %rdi
    mov     \selector, %rsi
    call    objc_msg_lookup@PLT
    mov     %rax, %r11
    movdqa  0(%rsp), %xmm0
    movdqa  16(%rsp), %xmm1
    movdqa  32(%rsp), %xmm2
    movdqa  48(%rsp), %xmm3
    movdqa  64(%rsp), %xmm4
    movdqa  80(%rsp), %xmm5
    movdqa  96(%rsp), %xmm6
    movdqa  112(%rsp), %xmm7
    mov     128(%rsp), %rdi
    mov     136(%rsp), %rsi
    mov     144(%rsp), %rdx
    mov     152(%rsp), %rcx
    mov     160(%rsp), %r8
    mov     168(%rsp), %r9
    mov     176(%rsp), %rax
    leave
    .cfi_def_cfa %rsp, 8
    .cfi_restore %rbp
.endm

    .globl  objc_msgSend
    .type   objc_msgSend, @function
    .p2align 4
objc_msgSend:
    .cfi_startproc
    test    %rdi, %rdi
    jz      1f
    LOOKUP  %rdi, %rsi
    jmp     *%r11
1:
    xor     %eax, %eax
    xor     %edx, %edx
    pxor    %xmm0, %xmm0
    pxor    %xmm1, %xmm1
    ret
    .cfi_endproc
    .size   objc_msgSend, .-objc_msgSend

    .globl  objc_msgSend_stret
    .type   objc_msgSend_stret, @function
    .p2align 4
objc_msgSend_stret:
    .cfi_startproc
    test    %rsi, %rsi
    jz      1f
    LOOKUP  %rsi, %rdx
    jmp     *%r11
1:
    mov     %rdi, %rax
    ret
    .cfi_endproc
    .size   objc_msgSend_stret, .-objc_msgSend_stret

// long double returns: x86-64 passes them on the x87 stack; a nil receiver must leave 0 there.
    .globl  objc_msgSend_fpret
    .type   objc_msgSend_fpret, @function
    .p2align 4
objc_msgSend_fpret:
    .cfi_startproc
    test    %rdi, %rdi
    jz      1f
    LOOKUP  %rdi, %rsi
    jmp     *%r11
1:
    fldz
    xor     %eax, %eax
    ret
    .cfi_endproc
    .size   objc_msgSend_fpret, .-objc_msgSend_fpret

#endif

    .section .note.GNU-stack,"",@progbits
