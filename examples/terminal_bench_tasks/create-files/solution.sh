mkdir -p ~/project/src ~/project/docs
echo "print('hello')" > ~/project/src/main.py
printf '# Project\n\nA small project.\n' > ~/project/docs/README.md
ls -R ~/project
